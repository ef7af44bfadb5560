// Element types: XLA's PrimitiveType numbers (as on the wire), item sizes,
// and the names JAX and numpy use ("float32", "bfloat16", ...).
#ifndef FARCALL_CORE_DTYPE_H_
#define FARCALL_CORE_DTYPE_H_

#include <cstdint>
#include <optional>
#include "absl/strings/string_view.h"
#include <vector>

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

enum class DTypeKind { kBool, kSigned, kUnsigned, kFloat, kComplex };

// Every dtype farcall knows, in wire-number order (kInvalid excluded).
const std::vector<DType>& AllDTypes();

// The dtype with wire number `n`, or nullopt if farcall does not know it.
std::optional<DType> DTypeFromNumber(int32_t n);

// Bytes per element; 0 for kInvalid.
int64_t ItemSize(DType d);

// "float32", "bfloat16", "bool", "float8_e4m3fn", ...: numpy's names, which
// JAX prints in abstract values (float32[4,8]). "invalid" for kInvalid.
absl::string_view DTypeName(DType d);

// The dtype named `name` (as DTypeName writes it), or nullopt.
std::optional<DType> DTypeFromName(absl::string_view name);

DTypeKind KindOf(DType d);
inline bool IsFloating(DType d) { return KindOf(d) == DTypeKind::kFloat; }
inline bool IsComplex(DType d) { return KindOf(d) == DTypeKind::kComplex; }
// Integers, floats and complex numbers; not bool.
inline bool IsNumeric(DType d) { return KindOf(d) != DTypeKind::kBool; }

}  // namespace farcall

#endif  // FARCALL_CORE_DTYPE_H_
