// TensorSpec: a dtype and dims. Tensors are dense and row-major; the byte size
// is the product of the dims times the item size, and rank 0 is a scalar.
#ifndef FARCALL_CORE_TENSOR_SPEC_H_
#define FARCALL_CORE_TENSOR_SPEC_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/status/statusor.h"
#include "core/dtype.h"

namespace farcall {

struct TensorSpec {
  DType dtype = DType::kInvalid;
  std::vector<int64_t> dims;

  friend bool operator==(const TensorSpec& a, const TensorSpec& b) {
    return a.dtype == b.dtype && a.dims == b.dims;
  }
  friend bool operator!=(const TensorSpec& a, const TensorSpec& b) {
    return !(a == b);
  }
};

// Number of elements; 1 for a scalar. Assumes a valid spec (see ByteSize).
int64_t ElementCount(const TensorSpec& spec);

// Byte size. INVALID_ARGUMENT for an unknown dtype, a negative dim, or a
// size that overflows int64. `what` names the tensor in the message, e.g.
// "args[2]".
absl::StatusOr<int64_t> ByteSize(const TensorSpec& spec, absl::string_view what);

// "float32[4,8]"; a scalar is "float32[]". This is also how JAX prints an
// abstract value (str of a ShapedArray), as in its alias errors.
std::string SpecToString(const TensorSpec& spec);

// Parses what SpecToString writes. INVALID_ARGUMENT with the reason.
absl::StatusOr<TensorSpec> ParseTensorSpec(absl::string_view text);

}  // namespace farcall

#endif  // FARCALL_CORE_TENSOR_SPEC_H_
