#include "core/tensor_spec.h"
#include "absl/strings/string_view.h"

#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace farcall {

int64_t ElementCount(const TensorSpec& spec) {
  int64_t n = 1;
  for (int64_t d : spec.dims) n *= d;
  return n;
}

absl::StatusOr<int64_t> ByteSize(const TensorSpec& spec, absl::string_view what) {
  int64_t item = ItemSize(spec.dtype);
  if (item == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " has unknown dtype ", static_cast<int32_t>(spec.dtype), "."));
  }
  int64_t size = item;
  for (size_t i = 0; i < spec.dims.size(); ++i) {
    int64_t d = spec.dims[i];
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " has negative dim ", d, " at index ", i, "."));
    }
  }
  // Overflow is judged after the negative check so that the message names
  // the real problem; a zero dim makes any size valid.
  for (size_t i = 0; i < spec.dims.size(); ++i) {
    int64_t d = spec.dims[i];
    if (d != 0 && size > std::numeric_limits<int64_t>::max() / d) {
      bool has_zero = false;
      for (int64_t e : spec.dims) has_zero |= (e == 0);
      if (has_zero) return 0;
      return absl::InvalidArgumentError(
          absl::StrCat(what, " ", SpecToString(spec),
                       " has a byte size that overflows int64 at dim ", i, " (", d, ")."));
    }
    size *= d;
  }
  return size;
}

std::string SpecToString(const TensorSpec& spec) {
  return absl::StrCat(DTypeName(spec.dtype), "[", absl::StrJoin(spec.dims, ","), "]");
}

absl::StatusOr<TensorSpec> ParseTensorSpec(absl::string_view text) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad tensor spec '", text, "': ", why,
                     " (expected DTYPE[D0,D1,...], such as float32[4,8] or int32[])"));
  };
  size_t open = text.find('[');
  if (open == absl::string_view::npos || text.back() != ']') {
    return bad("no [dims]");
  }
  TensorSpec spec;
  absl::string_view name = text.substr(0, open);
  std::optional<DType> d = DTypeFromName(name);
  if (!d) return bad(absl::StrCat("unknown dtype '", name, "'"));
  spec.dtype = *d;
  absl::string_view dims = text.substr(open + 1, text.size() - open - 2);
  if (!dims.empty()) {
    for (absl::string_view part : absl::StrSplit(dims, ',')) {
      int64_t v;
      if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(part), &v) || v < 0) {
        return bad(absl::StrCat("bad dim '", part, "'"));
      }
      spec.dims.push_back(v);
    }
  }
  return spec;
}

}  // namespace farcall
