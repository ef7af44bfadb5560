// Element types: XLA's PrimitiveType numbers (as on the wire), item sizes,
// and the names JAX and numpy use ("float32", "bfloat16", ...).
#ifndef FARCALL_CORE_DTYPE_H_
#define FARCALL_CORE_DTYPE_H_

#include <cstdint>
#include <optional>
#include <vector>
#include "absl/strings/string_view.h"

#include "farcall/tensor_spec.h"  // DType, ItemSize, DTypeName

namespace farcall {

enum class DTypeKind { kBool, kSigned, kUnsigned, kFloat, kComplex };

// Every dtype farcall knows, in wire-number order (kInvalid excluded).
const std::vector<DType>& AllDTypes();

// The dtype with wire number `n`, or nullopt if farcall does not know it.
std::optional<DType> DTypeFromNumber(int32_t n);

// ItemSize() and DTypeName(): in farcall/tensor_spec.h.

// The dtype named `name` (as DTypeName writes it), or nullopt.
std::optional<DType> DTypeFromName(absl::string_view name);

DTypeKind KindOf(DType d);
inline bool IsFloating(DType d) { return KindOf(d) == DTypeKind::kFloat; }
inline bool IsComplex(DType d) { return KindOf(d) == DTypeKind::kComplex; }
// Integers, floats and complex numbers; not bool.
inline bool IsNumeric(DType d) { return KindOf(d) != DTypeKind::kBool; }

}  // namespace farcall

#endif  // FARCALL_CORE_DTYPE_H_
