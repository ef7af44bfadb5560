// farcall's public element types and tensor specs, for the client library
// and whatever is built on it: a dtype (XLA's PrimitiveType numbers, as on
// the wire) and dims. Tensors are dense and row-major; the byte size is the
// product of the dims times the item size, and rank 0 is a scalar.
// Installed as <farcall/tensor_spec.h>; needs only Abseil's headers and the
// handler SDK's C header, whose FarcallDType numbers DType takes.
#ifndef FARCALL_TENSOR_SPEC_H_
#define FARCALL_TENSOR_SPEC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "farcall/handler_api.h"

namespace farcall {

// Same numbers as farcall.v1.DType and XLA's PrimitiveType.
enum class DType : int32_t {
  kInvalid = FARCALL_DTYPE_INVALID,
  kPred = FARCALL_DTYPE_PRED,
  kS8 = FARCALL_DTYPE_S8,
  kS16 = FARCALL_DTYPE_S16,
  kS32 = FARCALL_DTYPE_S32,
  kS64 = FARCALL_DTYPE_S64,
  kU8 = FARCALL_DTYPE_U8,
  kU16 = FARCALL_DTYPE_U16,
  kU32 = FARCALL_DTYPE_U32,
  kU64 = FARCALL_DTYPE_U64,
  kF16 = FARCALL_DTYPE_F16,
  kF32 = FARCALL_DTYPE_F32,
  kF64 = FARCALL_DTYPE_F64,
  kC64 = FARCALL_DTYPE_C64,
  kBF16 = FARCALL_DTYPE_BF16,
  kC128 = FARCALL_DTYPE_C128,
  kF8E5M2 = FARCALL_DTYPE_F8E5M2,
  kF8E4M3FN = FARCALL_DTYPE_F8E4M3FN,
  kF8E4M3B11FNUZ = FARCALL_DTYPE_F8E4M3B11FNUZ,
  kF8E5M2FNUZ = FARCALL_DTYPE_F8E5M2FNUZ,
  kF8E4M3FNUZ = FARCALL_DTYPE_F8E4M3FNUZ,
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
