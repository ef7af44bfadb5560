// farcall's public element types and tensor specs, for the client library
// and whatever is built on it: a dtype (XLA's PrimitiveType numbers, as on
// the wire) and dims. Tensors are dense and row-major; the byte size is the
// product of the dims times the item size, and rank 0 is a scalar.
// Installed as <farcall/tensor_spec.h>; needs only Abseil's headers.
#ifndef FARCALL_TENSOR_SPEC_H_
#define FARCALL_TENSOR_SPEC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace farcall {

// Same numbers as farcall.v1.DType and XLA's PrimitiveType.
enum class DType : int32_t {
  kInvalid = 0,
  kPred = 1,
  kS8 = 2,
  kS16 = 3,
  kS32 = 4,
  kS64 = 5,
  kU8 = 6,
  kU16 = 7,
  kU32 = 8,
  kU64 = 9,
  kF16 = 10,
  kF32 = 11,
  kF64 = 12,
  kC64 = 15,
  kBF16 = 16,
  kC128 = 18,
  kF8E5M2 = 19,
  kF8E4M3FN = 20,
  kF8E4M3B11FNUZ = 23,
  kF8E5M2FNUZ = 24,
  kF8E4M3FNUZ = 25,
};

struct TensorSpec {
  DType dtype = DType::kInvalid;
  std::vector<int64_t> dims;

  friend bool operator==(const TensorSpec& a, const TensorSpec& b) {
    return a.dtype == b.dtype && a.dims == b.dims;
  }
  friend bool operator!=(const TensorSpec& a, const TensorSpec& b) { return !(a == b); }
};

// Bytes per element; 0 for kInvalid.
int64_t ItemSize(DType d);

// "float32", "bfloat16", "bool", "float8_e4m3fn", ...: numpy's names, which
// JAX prints in abstract values (float32[4,8]). "invalid" for kInvalid.
absl::string_view DTypeName(DType d);

// Number of elements; 1 for a scalar.
int64_t ElementCount(const TensorSpec& spec);

// "float32[4,8]"; a scalar is "float32[]", as JAX prints an abstract value.
std::string SpecToString(const TensorSpec& spec);

}  // namespace farcall

#endif  // FARCALL_TENSOR_SPEC_H_
