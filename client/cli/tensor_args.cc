#include "client/cli/tensor_args.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/cli/npy.h"
#include "core/dtype.h"
#include "core/float_types.h"
#include "core/status_macros.h"

namespace farcall::cli {
namespace {

// Elements are stored by copying the low bytes of a uint64_t.
static_assert(std::endian::native == std::endian::little,
              "tensor_args.cc assumes a little-endian host");

// A generated tensor lives in this process's memory; a typo such as
// float32[100000,100000] should be an error, not an allocation failure.
constexpr int64_t kMaxGeneratedBytes = int64_t{16} << 30;

// One element before it is encoded: `bits` for bool and integers (two's
// complement), `re` and `im` for floats and complex numbers.
struct Element {
  uint64_t bits = 0;
  double re = 0;
  double im = 0;
};

void StoreReal(DType d, double v, uint8_t* dst) {
  switch (d) {
    case DType::kF16: {
      uint16_t h = FloatToHalf(static_cast<float>(v));
      std::memcpy(dst, &h, 2);
      return;
    }
    case DType::kBF16: {
      uint16_t h = FloatToBF16(static_cast<float>(v));
      std::memcpy(dst, &h, 2);
      return;
    }
    case DType::kF32: {
      float f = static_cast<float>(v);
      std::memcpy(dst, &f, 4);
      return;
    }
    case DType::kF64:
      std::memcpy(dst, &v, 8);
      return;
    default:  // the 8-bit floats
      *dst = FloatToF8(d, static_cast<float>(v));
      return;
  }
}

void StoreElement(DType d, const Element& e, uint8_t* dst) {
  switch (KindOf(d)) {
    case DTypeKind::kBool:
      *dst = e.bits != 0;
      return;
    case DTypeKind::kSigned:
    case DTypeKind::kUnsigned:
      std::memcpy(dst, &e.bits, ItemSize(d));
      return;
    case DTypeKind::kFloat:
      StoreReal(d, e.re, dst);
      return;
    case DTypeKind::kComplex:
      if (d == DType::kC64) {
        float parts[2] = {static_cast<float>(e.re), static_cast<float>(e.im)};
        std::memcpy(dst, parts, 8);
      } else {
        double parts[2] = {e.re, e.im};
        std::memcpy(dst, parts, 16);
      }
      return;
  }
}

double LoadReal(DType d, const uint8_t* p) {
  switch (d) {
    case DType::kF16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return HalfToFloat(h);
    }
    case DType::kBF16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return BF16ToFloat(h);
    }
    case DType::kF32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case DType::kF64: {
      double v;
      std::memcpy(&v, p, 8);
      return v;
    }
    default:
      return F8ToFloat(d, *p);
  }
}

// splitmix64's finalizer, applied to a counter: element i's random bits do
// not depend on the platform's <random> or on the order of generation.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Uniform in [-1, 1), from the top 53 bits.
double Signed01(uint64_t h) { return static_cast<double>(h >> 11) * 0x1p-53 * 2.0 - 1.0; }

Element RandomElement(DType d, int64_t i) {
  const uint64_t h = Mix(static_cast<uint64_t>(i) * 2);
  Element e;
  switch (KindOf(d)) {
    case DTypeKind::kBool:
      e.bits = h >> 63;
      break;
    case DTypeKind::kSigned:
      e.bits = static_cast<uint64_t>(static_cast<int64_t>(h % 17) - 8);
      break;
    case DTypeKind::kUnsigned:
      e.bits = h % 17;
      break;
    case DTypeKind::kFloat:
    case DTypeKind::kComplex:
      e.re = Signed01(h);
      e.im = IsComplex(d) ? Signed01(Mix(static_cast<uint64_t>(i) * 2 + 1)) : 0.0;
      break;
  }
  return e;
}

bool IsInteger(DType d) {
  return KindOf(d) == DTypeKind::kSigned || KindOf(d) == DTypeKind::kUnsigned;
}

// The one element a numeric FILL stands for, checked against `d`; nullopt
// (with `why` set) if it does not fit, or if `fill` is not a number.
std::optional<Element> NumberElement(DType d, absl::string_view fill, std::string& why) {
  const int bits = static_cast<int>(ItemSize(d) * 8);
  const bool is_signed = KindOf(d) == DTypeKind::kSigned;
  auto out_of_range = [&] {
    why = absl::StrCat(fill, " does not fit ", DTypeName(d));
    return std::nullopt;
  };
  Element e;
  int64_t i;
  uint64_t u;
  double v;
  if (fill == "true" || fill == "false") {
    e.bits = fill == "true";
    e.re = static_cast<double>(e.bits);
    return e;
  }
  if (absl::SimpleAtoi(fill, &i)) {
    if (KindOf(d) == DTypeKind::kBool && i != 0 && i != 1) {
      return out_of_range();
    }
    if (is_signed && bits < 64 &&
        (i < -(int64_t{1} << (bits - 1)) || i >= (int64_t{1} << (bits - 1)))) {
      return out_of_range();
    }
    if (KindOf(d) == DTypeKind::kUnsigned && (i < 0 || (bits < 64 && i >= (int64_t{1} << bits)))) {
      return out_of_range();
    }
    e.bits = static_cast<uint64_t>(i);
    e.re = static_cast<double>(i);
    return e;
  }
  // Only uint64 values above INT64_MAX get here.
  if (absl::SimpleAtoi(fill, &u)) {
    if (KindOf(d) == DTypeKind::kBool || is_signed || (IsInteger(d) && bits < 64)) {
      return out_of_range();
    }
    e.bits = u;
    e.re = static_cast<double>(u);
    return e;
  }
  if (!absl::SimpleAtod(fill, &v)) {
    why = absl::StrCat("unknown fill '", fill,
                       "' (expected iota, zeros, ones, random, a number, true or false)");
    return std::nullopt;
  }
  if (IsFloating(d) || IsComplex(d)) {
    e.re = v;
    return e;
  }
  // bool and integers take a float literal only if it is a whole number in
  // range (1e3 for int32 is fine, 2.5 is not); numpy would truncate silently.
  if (v != std::floor(v)) {
    why = absl::StrCat(fill, " is not a whole number, as ", DTypeName(d), " needs");
    return std::nullopt;
  }
  if (KindOf(d) == DTypeKind::kBool) {
    if (v != 0 && v != 1) return out_of_range();
    e.bits = v == 1;
    return e;
  }
  // The bounds are powers of two, so exact as doubles.
  const double lo = is_signed ? -std::ldexp(1.0, bits - 1) : 0.0;
  const double hi = std::ldexp(1.0, is_signed ? bits - 1 : bits);
  if (!(v >= lo && v < hi)) return out_of_range();
  e.bits = is_signed ? static_cast<uint64_t>(static_cast<int64_t>(v)) : static_cast<uint64_t>(v);
  return e;
}

template <typename Gen>
void Fill(const TensorSpec& spec, HostTensor& t, Gen gen) {
  const int64_t n = ElementCount(spec);
  const int64_t item = ItemSize(spec.dtype);
  for (int64_t i = 0; i < n; ++i) {
    StoreElement(spec.dtype, gen(i), t.bytes.data() + i * item);
  }
}

std::string FormatReal(double v) {
  // glibc prints a NaN with its sign bit as "-nan"; numpy prints "nan".
  if (std::isnan(v)) return "nan";
  return absl::StrFormat("%g", v);
}

std::string FormatElement(DType d, const uint8_t* p) {
  const int64_t size = ItemSize(d);
  switch (KindOf(d)) {
    case DTypeKind::kBool:
      return *p ? "true" : "false";
    case DTypeKind::kSigned: {
      // Sign-extend the little-endian value.
      uint64_t u = 0;
      std::memcpy(&u, p, size);
      const int shift = static_cast<int>(64 - 8 * size);
      return absl::StrCat(static_cast<int64_t>(u << shift) >> shift);
    }
    case DTypeKind::kUnsigned: {
      uint64_t u = 0;
      std::memcpy(&u, p, size);
      return absl::StrCat(u);
    }
    case DTypeKind::kFloat:
      return FormatReal(LoadReal(d, p));
    case DTypeKind::kComplex: {
      double re, im;
      if (d == DType::kC64) {
        float parts[2];
        std::memcpy(parts, p, 8);
        re = parts[0];
        im = parts[1];
      } else {
        double parts[2];
        std::memcpy(parts, p, 16);
        re = parts[0];
        im = parts[1];
      }
      // Python's form: (1+2j), (1-2j), (1+nanj).
      std::string imag = FormatReal(im);
      const char* sign = (!imag.empty() && imag[0] == '-') ? "" : "+";
      return absl::StrCat("(", FormatReal(re), sign, imag, "j)");
    }
  }
  return "?";
}

}  // namespace

absl::StatusOr<HostTensor> ParseTensorArg(absl::string_view text) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("bad tensor argument '", text, "': ", why));
  };
  if (text.empty()) {
    return bad("empty (expected PATH.npy[:DTYPE] or DTYPE[DIMS][:FILL])");
  }
  if (absl::EndsWith(text, ".npy")) return ReadNpy(std::string(text));
  if (size_t colon = text.rfind(':');
      colon != absl::string_view::npos && absl::EndsWith(text.substr(0, colon), ".npy")) {
    absl::string_view name = text.substr(colon + 1);
    std::optional<DType> as = DTypeFromName(name);
    if (!as) return bad(absl::StrCat("unknown dtype '", name, "'"));
    return ReadNpy(std::string(text.substr(0, colon)), as);
  }

  // Dims never contain ':' but a FILL such as -1 may follow the ']'.
  size_t close = text.find(']');
  absl::string_view spec_text = close == absl::string_view::npos ? text : text.substr(0, close + 1);
  absl::string_view rest = close == absl::string_view::npos ? "" : text.substr(close + 1);
  absl::StatusOr<TensorSpec> spec = ParseTensorSpec(spec_text);
  if (!spec.ok()) return bad(spec.status().message());
  absl::string_view fill = "iota";
  if (!rest.empty()) {
    if (rest[0] != ':' || rest.size() == 1) {
      return bad("expected ':FILL' after the spec");
    }
    fill = rest.substr(1);
  }
  absl::StatusOr<int64_t> size = ByteSize(*spec, "tensor");
  if (!size.ok()) return bad(size.status().message());
  if (*size > kMaxGeneratedBytes) {
    return bad(absl::StrCat("too large to generate (", *size, " bytes; the limit is ",
                            kMaxGeneratedBytes, ")"));
  }

  HostTensor t;
  t.spec = *spec;
  t.bytes.resize(static_cast<size_t>(*size));
  const DType d = spec->dtype;
  if (fill == "iota") {
    Fill(*spec, t, [&](int64_t i) {
      Element e;
      e.bits = d == DType::kPred ? i % 2 : static_cast<uint64_t>(i);
      e.re = static_cast<double>(i);
      return e;
    });
  } else if (fill == "zeros") {
    // resize() already zeroed the bytes, and zero bits are 0 in every dtype.
  } else if (fill == "ones") {
    Fill(*spec, t, [](int64_t) { return Element{1, 1.0, 0.0}; });
  } else if (fill == "random") {
    Fill(*spec, t, [&](int64_t i) { return RandomElement(d, i); });
  } else {
    std::string why;
    std::optional<Element> e = NumberElement(d, fill, why);
    if (!e) return bad(why);
    Fill(*spec, t, [&](int64_t) { return *e; });
  }
  return t;
}

std::string FormatTensor(const TensorSpec& spec, const void* data, size_t size, int max_elements) {
  std::string out = absl::StrCat(SpecToString(spec), " ");
  absl::StatusOr<int64_t> want = ByteSize(spec, "tensor");
  if (!want.ok()) return absl::StrCat(out, "<", want.status().message(), ">");
  if (static_cast<uint64_t>(*want) != size) {
    return absl::StrCat(out, "<", size, " bytes; expected ", *want, ">");
  }
  const auto* bytes = static_cast<const uint8_t*>(data);
  const int64_t item = ItemSize(spec.dtype);
  if (spec.dims.empty()) {
    return absl::StrCat(out, FormatElement(spec.dtype, bytes));
  }
  const int64_t n = ElementCount(spec);
  const int64_t shown = std::max(max_elements, 0);
  const int64_t head = n > shown ? (shown + 1) / 2 : n;
  const int64_t tail = n > shown ? shown / 2 : 0;
  out += "[";
  for (int64_t i = 0; i < head; ++i) {
    if (i > 0) out += ", ";
    out += FormatElement(spec.dtype, bytes + i * item);
  }
  if (n > shown) out += head > 0 ? ", ..." : "...";
  for (int64_t i = n - tail; i < n; ++i) {
    out += ", ";
    out += FormatElement(spec.dtype, bytes + i * item);
  }
  out += "]";
  return out;
}

absl::StatusOr<std::pair<uint32_t, uint32_t>> ParseAlias(absl::string_view text) {
  size_t colon = text.find(':');
  uint32_t in, out;
  // SimpleAtoi would accept " 1" and "+1"; an index is plain digits.
  auto digits = [](absl::string_view s) {
    if (s.empty()) return false;
    for (char c : s) {
      if (!absl::ascii_isdigit(c)) return false;
    }
    return true;
  };
  if (colon == absl::string_view::npos || !digits(text.substr(0, colon)) ||
      !digits(text.substr(colon + 1)) || !absl::SimpleAtoi(text.substr(0, colon), &in) ||
      !absl::SimpleAtoi(text.substr(colon + 1), &out)) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad alias '", text, "': expected INPUT:OUTPUT indices, such as 0:0"));
  }
  return std::make_pair(in, out);
}

absl::StatusOr<std::pair<std::string, AttrValue>> ParseAttr(absl::string_view text) {
  size_t eq = text.find('=');
  absl::string_view name = eq == absl::string_view::npos ? text : text.substr(0, eq);
  bool name_ok = eq != absl::string_view::npos && !name.empty();
  for (char c : name) name_ok &= !absl::ascii_isspace(c);
  if (!name_ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bad attribute '", text, "': expected NAME=VALUE, such as scale=2.5 or mode=str:fast"));
  }
  std::string key(name);
  absl::string_view value = text.substr(eq + 1);
  if (absl::StartsWith(value, "str:")) {
    return std::make_pair(key, AttrValue(std::string(value.substr(4))));
  }
  if (value == "true" || value == "false") {
    return std::make_pair(key, AttrValue(value == "true"));
  }
  absl::string_view unsigned_part = value;
  if (!value.empty() && (value[0] == '-' || value[0] == '+')) {
    unsigned_part.remove_prefix(1);
  }
  bool all_digits = !unsigned_part.empty();
  for (char c : unsigned_part) all_digits &= absl::ascii_isdigit(c) != 0;
  if (all_digits) {
    int64_t i;
    if (!absl::SimpleAtoi(value, &i)) {
      return absl::InvalidArgumentError(absl::StrCat("bad attribute '", text, "': ", value,
                                                     " does not fit int64 (write str:", value,
                                                     " for a string)"));
    }
    return std::make_pair(key, AttrValue(i));
  }
  double v;
  if (value.find_first_of(".eE") != absl::string_view::npos && absl::SimpleAtod(value, &v)) {
    return std::make_pair(key, AttrValue(v));
  }
  return std::make_pair(key, AttrValue(std::string(value)));
}

}  // namespace farcall::cli
