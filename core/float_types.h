// Conversions between float32 and the narrow float formats farcall carries:
// IEEE binary16 (float16), bfloat16, and the five 8-bit floats of ml_dtypes.
//
// Every FloatTo* rounds to nearest, ties to even, and maps NaN to NaN. Values
// too large for the format become infinity where the format has one (float16,
// bfloat16, float8_e5m2) and NaN otherwise, as ml_dtypes does (no
// saturation). The FNUZ formats have no negative zero: -0.0 and negative
// values that round to zero encode as +0, and their one NaN is 0x80.
//
// Header-only and dependency-free so that handlers and plugins can use it.
// All functions are pure and thread-safe.
//
//   uint16_t h = farcall::FloatToHalf(1.0f);                   // 0x3C00
//   float f = farcall::F8ToFloat(farcall::DType::kF8E4M3FN, 0x38);  // 1.0f
#ifndef FARCALL_CORE_FLOAT_TYPES_H_
#define FARCALL_CORE_FLOAT_TYPES_H_

#include <cstdint>

#include "core/dtype.h"
#include "core/float_formats.h"

namespace farcall {

// True for the five 8-bit float dtypes.
constexpr bool IsFloat8(DType d) {
  return d == DType::kF8E5M2 || d == DType::kF8E4M3FN || d == DType::kF8E4M3B11FNUZ ||
         d == DType::kF8E5M2FNUZ || d == DType::kF8E4M3FNUZ;
}

namespace float_types_internal {

// The format of an 8-bit float dtype; `ok` is false for any other dtype.
constexpr MiniFormat F8Format(DType d, bool& ok) {
  ok = true;
  switch (d) {
    case DType::kF8E5M2:
      return kF8E5M2Format;
    case DType::kF8E4M3FN:
      return kF8E4M3FNFormat;
    case DType::kF8E4M3B11FNUZ:
      return kF8E4M3B11FNUZFormat;
    case DType::kF8E5M2FNUZ:
      return kF8E5M2FNUZFormat;
    case DType::kF8E4M3FNUZ:
      return kF8E4M3FNUZFormat;
    default:
      ok = false;
      return kF8E4M3FNFormat;
  }
}

}  // namespace float_types_internal

// 8-bit floats <-> float32. `d` must satisfy IsFloat8(d); for any other
// dtype F8ToFloat returns NaN and FloatToF8 returns 0.
inline float F8ToFloat(DType d, uint8_t v) {
  bool ok = false;
  const float_types_internal::MiniFormat fmt = float_types_internal::F8Format(d, ok);
  if (!ok) return float_types_internal::BitsToFloat(0x7FC00000u);
  return float_types_internal::Decode(fmt, v);
}
inline uint8_t FloatToF8(DType d, float f) {
  bool ok = false;
  const float_types_internal::MiniFormat fmt = float_types_internal::F8Format(d, ok);
  if (!ok) return 0;
  return static_cast<uint8_t>(float_types_internal::Encode(fmt, f));
}

}  // namespace farcall

#endif  // FARCALL_CORE_FLOAT_TYPES_H_
