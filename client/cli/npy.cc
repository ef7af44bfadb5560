#include "client/cli/npy.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"

namespace farcall::cli {
namespace {

// The byte swapping and the little-endian descrs we write assume this.
static_assert(std::endian::native == std::endian::little, "npy.cc assumes a little-endian host");

constexpr absl::string_view kMagic = "\x93NUMPY";
// Magic, two version bytes, then the header length.
constexpr size_t kPreambleV1 = 6 + 2 + 2;
constexpr size_t kPreambleV2 = 6 + 2 + 4;
// numpy pads the whole preamble + header to a multiple of 64 so that the data
// is aligned for memory mapping; we do the same.
constexpr size_t kAlign = 64;

struct NpyHeader {
  std::string descr;
  bool fortran_order = false;
  std::vector<int64_t> shape;
};

// A parser for the one Python dict literal numpy writes, e.g.
// {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
// It is not a general literal parser: the three values have fixed types.
class HeaderParser {
 public:
  HeaderParser(absl::string_view text, absl::string_view what) : text_(text), what_(what) {}

  absl::StatusOr<NpyHeader> Parse() {
    NpyHeader h;
    bool have_descr = false, have_fortran = false, have_shape = false;
    SkipSpace();
    if (!Consume('{')) return Error("header is not a dict");
    while (true) {
      SkipSpace();
      if (Consume('}')) break;
      FARCALL_ASSIGN_OR_RETURN(std::string key, ParseString());
      SkipSpace();
      if (!Consume(':')) return Error("expected ':' after a key");
      SkipSpace();
      if (key == "descr") {
        if (Peek() == '[') {
          return Error("structured dtypes are not supported");
        }
        FARCALL_ASSIGN_OR_RETURN(h.descr, ParseString());
        have_descr = true;
      } else if (key == "fortran_order") {
        FARCALL_ASSIGN_OR_RETURN(h.fortran_order, ParseBool());
        have_fortran = true;
      } else if (key == "shape") {
        FARCALL_ASSIGN_OR_RETURN(h.shape, ParseShape());
        have_shape = true;
      } else {
        return Error(absl::StrCat("unexpected key '", key, "'"));
      }
      SkipSpace();
      if (Consume('}')) break;
      if (!Consume(',')) return Error("expected ',' or '}' in the dict");
    }
    if (!have_descr || !have_fortran || !have_shape) {
      return Error("header lacks one of 'descr', 'fortran_order', 'shape'");
    }
    return h;
  }

 private:
  char Peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  bool Consume(char c) {
    if (Peek() != c) return false;
    ++pos_;
    return true;
  }
  bool ConsumeWord(absl::string_view w) {
    if (text_.substr(pos_, w.size()) != w) return false;
    pos_ += w.size();
    return true;
  }
  void SkipSpace() {
    while (pos_ < text_.size() && absl::ascii_isspace(text_[pos_])) ++pos_;
  }
  absl::Status Error(absl::string_view why) const {
    return absl::InvalidArgumentError(absl::StrCat(what_, ": bad .npy header: ", why));
  }

  absl::StatusOr<std::string> ParseString() {
    char quote = Peek();
    if (quote != '\'' && quote != '"') return Error("expected a string");
    size_t end = text_.find(quote, pos_ + 1);
    if (end == absl::string_view::npos) return Error("unterminated string");
    std::string s(text_.substr(pos_ + 1, end - pos_ - 1));
    // numpy never escapes anything in these strings.
    if (s.find('\\') != std::string::npos) return Error("escaped string");
    pos_ = end + 1;
    return s;
  }

  absl::StatusOr<bool> ParseBool() {
    if (ConsumeWord("True")) return true;
    if (ConsumeWord("False")) return false;
    return Error("fortran_order is not True or False");
  }

  absl::StatusOr<std::vector<int64_t>> ParseShape() {
    std::vector<int64_t> dims;
    if (!Consume('(')) return Error("shape is not a tuple");
    while (true) {
      SkipSpace();
      if (Consume(')')) break;
      size_t start = pos_;
      while (absl::ascii_isdigit(Peek())) ++pos_;
      int64_t d;
      if (!absl::SimpleAtoi(text_.substr(start, pos_ - start), &d)) {
        return Error("shape has a bad dimension");
      }
      Consume('L');  // Python 2 wrote longs as 3L.
      dims.push_back(d);
      SkipSpace();
      if (Consume(')')) break;
      if (!Consume(',')) return Error("expected ',' or ')' in the shape");
    }
    return dims;
  }

  absl::string_view text_;
  absl::string_view what_;
  size_t pos_ = 0;
};

// What a descr says about the stored items.
struct StoredType {
  std::optional<DType> dtype;  // nullopt for a void type ('V')
  int64_t item_size = 0;
  bool big_endian = false;
  // Bytes per swapped unit: the item size, or half of it for complex.
  int64_t swap_unit = 1;
};

absl::StatusOr<StoredType> ParseDescr(absl::string_view descr, absl::string_view what) {
  auto unsupported = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": unsupported .npy dtype '", descr,
                     "' (supported: bool, int8-64, uint8-64, float16/32/64, "
                     "complex64/128, and void types read with an explicit dtype)"));
  };
  StoredType t;
  absl::string_view s = descr;
  if (!s.empty() && (s[0] == '<' || s[0] == '>' || s[0] == '|' || s[0] == '=')) {
    t.big_endian = s[0] == '>';
    s.remove_prefix(1);
  }
  if (s.size() < 2) return unsupported();
  char kind = s[0];
  if (!absl::SimpleAtoi(s.substr(1), &t.item_size) || t.item_size <= 0) {
    return unsupported();
  }
  auto pick =
      [&](std::initializer_list<std::pair<int64_t, DType>> sizes) -> absl::StatusOr<StoredType> {
    for (const auto& [size, dtype] : sizes) {
      if (size == t.item_size) {
        t.dtype = dtype;
        t.swap_unit = kind == 'c' ? size / 2 : size;
        return t;
      }
    }
    return unsupported();
  };
  switch (kind) {
    case 'b':
      return pick({{1, DType::kPred}});
    case 'i':
      return pick({{1, DType::kS8}, {2, DType::kS16}, {4, DType::kS32}, {8, DType::kS64}});
    case 'u':
      return pick({{1, DType::kU8}, {2, DType::kU16}, {4, DType::kU32}, {8, DType::kU64}});
    case 'f':
      return pick({{2, DType::kF16}, {4, DType::kF32}, {8, DType::kF64}});
    case 'c':
      return pick({{8, DType::kC64}, {16, DType::kC128}});
    case 'V':
      // Raw bytes: nothing to swap, whatever the order character says.
      t.big_endian = false;
      t.swap_unit = 1;
      return t;
    default:
      return unsupported();
  }
}

// The descr we write for `d`. bfloat16 and the float8 types are written as
// the same-size unsigned integer, since numpy has no code for them and '<V2'
// would be read back by numpy as opaque bytes.
absl::StatusOr<absl::string_view> DescrFor(DType d) {
  switch (d) {
    case DType::kPred:
      return "|b1";
    case DType::kS8:
      return "|i1";
    case DType::kS16:
      return "<i2";
    case DType::kS32:
      return "<i4";
    case DType::kS64:
      return "<i8";
    case DType::kU8:
    case DType::kF8E5M2:
    case DType::kF8E4M3FN:
    case DType::kF8E4M3B11FNUZ:
    case DType::kF8E5M2FNUZ:
    case DType::kF8E4M3FNUZ:
      return "|u1";
    case DType::kU16:
    case DType::kBF16:
      return "<u2";
    case DType::kU32:
      return "<u4";
    case DType::kU64:
      return "<u8";
    case DType::kF16:
      return "<f2";
    case DType::kF32:
      return "<f4";
    case DType::kF64:
      return "<f8";
    case DType::kC64:
      return "<c8";
    case DType::kC128:
      return "<c16";
    case DType::kInvalid:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("cannot write dtype ", DTypeName(d), " to a .npy file"));
}

uint64_t ReadLittleEndian(absl::string_view bytes) {
  uint64_t v = 0;
  for (size_t i = bytes.size(); i-- > 0;) {
    v = (v << 8) | static_cast<uint8_t>(bytes[i]);
  }
  return v;
}

void AppendLittleEndian(uint64_t v, int n, std::string& out) {
  for (int i = 0; i < n; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
}

// Closes a FILE* when it goes out of scope, for the early returns.
struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using FilePtr = std::unique_ptr<std::FILE, FileCloser>;

}  // namespace

absl::StatusOr<HostTensor> DecodeNpy(absl::string_view file, absl::string_view what,
                                     std::optional<DType> as) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", why));
  };
  if (file.size() < kPreambleV1 || file.substr(0, kMagic.size()) != kMagic) {
    return bad("not a .npy file (bad magic)");
  }
  const uint8_t major = static_cast<uint8_t>(file[6]);
  const uint8_t minor = static_cast<uint8_t>(file[7]);
  size_t preamble;
  if (major == 1 && minor == 0) {
    preamble = kPreambleV1;
  } else if ((major == 2 || major == 3) && minor == 0) {
    preamble = kPreambleV2;
  } else {
    return bad(absl::StrCat("unsupported .npy format version ", major, ".", minor));
  }
  if (file.size() < preamble) return bad("truncated .npy header");
  const uint64_t header_len = ReadLittleEndian(file.substr(8, preamble - 8));
  if (header_len > file.size() - preamble) {
    return bad("truncated .npy header");
  }
  // Version 3.0 only differs in allowing UTF-8 in the header, which can only
  // appear in structured dtypes' field names; those are rejected anyway.
  FARCALL_ASSIGN_OR_RETURN(NpyHeader header,
                           HeaderParser(file.substr(preamble, header_len), what).Parse());
  if (header.fortran_order) {
    return bad(
        "fortran_order arrays are not supported; save with "
        "np.ascontiguousarray");
  }
  FARCALL_ASSIGN_OR_RETURN(StoredType stored, ParseDescr(header.descr, what));

  HostTensor t;
  t.spec.dims = header.shape;
  if (as.has_value()) {
    if (ItemSize(*as) != stored.item_size) {
      return bad(absl::StrCat("cannot read dtype '", header.descr, "' (", stored.item_size,
                              " bytes per item) as ", DTypeName(*as), " (", ItemSize(*as),
                              " bytes per item)"));
    }
    t.spec.dtype = *as;
  } else if (stored.dtype.has_value()) {
    t.spec.dtype = *stored.dtype;
  } else {
    return bad(absl::StrCat("void dtype '", header.descr,
                            "' needs an explicit dtype (ml_dtypes types such as bfloat16 are "
                            "saved this way); name one, e.g. file.npy:bfloat16"));
  }
  FARCALL_ASSIGN_OR_RETURN(int64_t size, ByteSize(t.spec, what));
  absl::string_view data = file.substr(preamble + header_len);
  if (data.size() != static_cast<uint64_t>(size)) {
    return bad(
        absl::StrCat(data.size() < static_cast<uint64_t>(size) ? "truncated data: "
                                                               : "extra bytes after the data: ",
                     SpecToString(t.spec), " needs ", size, " bytes, the file has ", data.size()));
  }
  t.bytes.assign(data.begin(), data.end());
  if (stored.big_endian && stored.swap_unit > 1) {
    const size_t unit = static_cast<size_t>(stored.swap_unit);
    for (size_t i = 0; i < t.bytes.size(); i += unit) {
      std::reverse(t.bytes.begin() + i, t.bytes.begin() + i + unit);
    }
  }
  return t;
}

absl::StatusOr<std::string> EncodeNpy(const TensorSpec& spec, const void* data, size_t size) {
  FARCALL_ASSIGN_OR_RETURN(absl::string_view descr, DescrFor(spec.dtype));
  FARCALL_ASSIGN_OR_RETURN(int64_t want, ByteSize(spec, "tensor"));
  if (static_cast<uint64_t>(want) != size) {
    return absl::InvalidArgumentError(
        absl::StrCat(SpecToString(spec), " needs ", want, " bytes, got ", size));
  }
  // Python's tuple syntax: (), (3,), (2, 3).
  std::string shape = absl::StrJoin(spec.dims, ", ");
  if (spec.dims.size() == 1) shape += ",";
  std::string header =
      absl::StrCat("{'descr': '", descr, "', 'fortran_order': False, 'shape': (", shape, "), }");
  size_t preamble = kPreambleV1;
  // +1 for the newline that ends the header.
  size_t total = (preamble + header.size() + 1 + kAlign - 1) / kAlign * kAlign;
  if (total - preamble > 0xffff) {
    preamble = kPreambleV2;
    total = (preamble + header.size() + 1 + kAlign - 1) / kAlign * kAlign;
  }
  header.append(total - preamble - header.size() - 1, ' ');
  header.push_back('\n');

  std::string out;
  out.reserve(total + size);
  out.append(kMagic.data(), kMagic.size());
  out.push_back(preamble == kPreambleV1 ? 1 : 2);
  out.push_back(0);
  AppendLittleEndian(header.size(), preamble == kPreambleV1 ? 2 : 4, out);
  out.append(header);
  if (size > 0) out.append(static_cast<const char*>(data), size);
  return out;
}

absl::StatusOr<HostTensor> ReadNpy(const std::string& path, std::optional<DType> as) {
  FilePtr f(std::fopen(path.c_str(), "rb"));
  if (f == nullptr) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot open ", path));
  }
  std::string file;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f.get())) > 0) {
    file.append(buf, n);
  }
  if (std::ferror(f.get())) {
    // A directory opens fine and fails here with EISDIR.
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot read ", path));
  }
  return DecodeNpy(file, path, as);
}

absl::Status WriteNpy(const std::string& path, const TensorSpec& spec, const void* data,
                      size_t size) {
  absl::StatusOr<std::string> file = EncodeNpy(spec, data, size);
  if (!file.ok()) {
    return absl::Status(file.status().code(), absl::StrCat(path, ": ", file.status().message()));
  }
  FilePtr f(std::fopen(path.c_str(), "wb"));
  if (f == nullptr) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot create ", path));
  }
  if (std::fwrite(file->data(), 1, file->size(), f.get()) != file->size() ||
      std::fflush(f.get()) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot write ", path));
  }
  // fclose can report a delayed write error, so check it rather than leaving
  // it to the deleter.
  if (std::fclose(f.release()) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot write ", path));
  }
  return absl::OkStatus();
}

}  // namespace farcall::cli
