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
#include <cstring>

#include "core/dtype.h"

namespace farcall {

// True for the five 8-bit float dtypes.
constexpr bool IsFloat8(DType d) {
  return d == DType::kF8E5M2 || d == DType::kF8E4M3FN ||
         d == DType::kF8E4M3B11FNUZ || d == DType::kF8E5M2FNUZ ||
         d == DType::kF8E4M3FNUZ;
}

namespace float_types_internal {

inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

inline float BitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// How a format spends its top encodings.
enum class NanStyle {
  kIeee,  // all-ones exponent: infinity (mantissa 0) or NaN
  kFn,    // no infinity; S.1111.111 (all ones) is NaN
  kFnuz,  // no infinity, no negative zero; 0x80 (the -0 encoding) is NaN
};

// A sign bit, `exp_bits` of biased exponent and `man_bits` of mantissa, in
// the low 1 + exp_bits + man_bits bits of a uint32_t.
struct MiniFormat {
  int exp_bits;
  int man_bits;
  int bias;
  NanStyle nan;
};

inline constexpr MiniFormat kHalfFormat{5, 10, 15, NanStyle::kIeee};

// The format of an 8-bit float dtype; `ok` is false for any other dtype.
constexpr MiniFormat F8Format(DType d, bool& ok) {
  ok = true;
  switch (d) {
    case DType::kF8E5M2:
      return {5, 2, 15, NanStyle::kIeee};
    case DType::kF8E4M3FN:
      return {4, 3, 7, NanStyle::kFn};
    case DType::kF8E4M3B11FNUZ:
      return {4, 3, 11, NanStyle::kFnuz};
    case DType::kF8E5M2FNUZ:
      return {5, 2, 16, NanStyle::kFnuz};
    case DType::kF8E4M3FNUZ:
      return {4, 3, 8, NanStyle::kFnuz};
    default:
      ok = false;
      return {4, 3, 7, NanStyle::kFn};
  }
}

// 2^k for -126 <= k <= 127, built from bits: this header avoids <cmath>.
inline float Pow2(int k) {
  return BitsToFloat(static_cast<uint32_t>(k + 127) << 23);
}

inline float Decode(const MiniFormat& fmt, uint32_t v) {
  const int total = 1 + fmt.exp_bits + fmt.man_bits;
  const uint32_t mag_mask = (1u << (total - 1)) - 1;
  const uint32_t sign = (v >> (total - 1)) & 1u;
  const uint32_t mag = v & mag_mask;
  const uint32_t e = mag >> fmt.man_bits;
  const uint32_t m = mag & ((1u << fmt.man_bits) - 1);
  const uint32_t sign32 = sign << 31;
  switch (fmt.nan) {
    case NanStyle::kIeee:
      if (e == (1u << fmt.exp_bits) - 1) {
        // Keep the payload and quieten it, as a hardware widening would.
        return BitsToFloat(m == 0 ? (sign32 | 0x7F800000u)
                                  : (sign32 | 0x7FC00000u |
                                     (m << (23 - fmt.man_bits))));
      }
      break;
    case NanStyle::kFn:
      if (mag == mag_mask) return BitsToFloat(sign32 | 0x7FC00000u);
      break;
    case NanStyle::kFnuz:
      if (sign != 0 && mag == 0) return BitsToFloat(0x7FC00000u);
      break;
  }
  if (e == 0) {
    // Subnormal: m units of the smallest subnormal; exact in float32.
    const float r =
        static_cast<float>(m) * Pow2(1 - fmt.bias - fmt.man_bits);
    return sign != 0 ? -r : r;
  }
  // Every normal narrow value is a normal float32: just move the fields.
  return BitsToFloat(
      sign32 |
      (static_cast<uint32_t>(static_cast<int>(e) - fmt.bias + 127) << 23) |
      (m << (23 - fmt.man_bits)));
}

inline uint32_t Encode(const MiniFormat& fmt, float f) {
  const int total = 1 + fmt.exp_bits + fmt.man_bits;
  const uint32_t mag_mask = (1u << (total - 1)) - 1;
  const uint32_t bits = FloatBits(f);
  const uint32_t abs = bits & 0x7FFFFFFFu;
  const uint32_t sign_out = (bits >> 31) << (total - 1);
  const uint32_t exp_all_ones = ((1u << fmt.exp_bits) - 1) << fmt.man_bits;

  uint32_t nan, overflow, max_finite;
  switch (fmt.nan) {
    case NanStyle::kIeee:
      nan = sign_out | exp_all_ones | (1u << (fmt.man_bits - 1));
      overflow = sign_out | exp_all_ones;  // infinity
      max_finite = exp_all_ones - 1;
      break;
    case NanStyle::kFn:
      nan = sign_out | mag_mask;
      overflow = nan;
      max_finite = mag_mask - 1;
      break;
    case NanStyle::kFnuz:
    default:
      nan = 1u << (total - 1);
      overflow = nan;
      max_finite = mag_mask;
      break;
  }
  if (abs > 0x7F800000u) return nan;
  if (abs == 0x7F800000u) return overflow;

  const int min_normal_exp = 1 - fmt.bias;
  const int e32 = static_cast<int>(abs >> 23) - 127;
  uint32_t mag;
  if (e32 >= min_normal_exp) {
    // Round the float32 exponent+mantissa field as one integer: a mantissa
    // carry then bumps the exponent by itself.
    const int shift = 23 - fmt.man_bits;
    uint32_t r =
        (abs + ((1u << (shift - 1)) - 1) + ((abs >> shift) & 1u)) >> shift;
    r -= static_cast<uint32_t>(127 - fmt.bias) << fmt.man_bits;
    if (r > max_finite) return overflow;
    mag = r;
  } else if ((abs >> 23) == 0) {
    mag = 0;  // float32 zero or subnormal: far below any narrow subnormal
  } else {
    // Below the narrow format's normal range: count units of its smallest
    // subnormal, rounding the 24-bit significand to nearest even. A result
    // of 1 << man_bits is the smallest normal, which is the right encoding.
    const uint32_t sig = (abs & 0x7FFFFFu) | 0x800000u;
    const int sh = 23 + min_normal_exp - fmt.man_bits - e32;  // >= 14
    mag = sh > 24 ? 0
                  : (sig + ((1u << (sh - 1)) - 1) + ((sig >> sh) & 1u)) >> sh;
  }
  if (mag == 0 && fmt.nan == NanStyle::kFnuz) return 0;  // no -0
  return sign_out | mag;
}

}  // namespace float_types_internal

// IEEE binary16 <-> float32.
inline float HalfToFloat(uint16_t h) {
  return float_types_internal::Decode(float_types_internal::kHalfFormat, h);
}
inline uint16_t FloatToHalf(float f) {
  return static_cast<uint16_t>(
      float_types_internal::Encode(float_types_internal::kHalfFormat, f));
}

// bfloat16 <-> float32. bfloat16 is the top half of a float32.
inline float BF16ToFloat(uint16_t b) {
  return float_types_internal::BitsToFloat(static_cast<uint32_t>(b) << 16);
}
inline uint16_t FloatToBF16(float f) {
  const uint32_t u = float_types_internal::FloatBits(f);
  // Truncating a NaN could clear every mantissa bit left and make infinity;
  // setting the quiet bit keeps it a NaN.
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) {
    return static_cast<uint16_t>((u >> 16) | 0x40u);
  }
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

// 8-bit floats <-> float32. `d` must satisfy IsFloat8(d); for any other
// dtype F8ToFloat returns NaN and FloatToF8 returns 0.
inline float F8ToFloat(DType d, uint8_t v) {
  bool ok = false;
  const float_types_internal::MiniFormat fmt =
      float_types_internal::F8Format(d, ok);
  if (!ok) return float_types_internal::BitsToFloat(0x7FC00000u);
  return float_types_internal::Decode(fmt, v);
}
inline uint8_t FloatToF8(DType d, float f) {
  bool ok = false;
  const float_types_internal::MiniFormat fmt =
      float_types_internal::F8Format(d, ok);
  if (!ok) return 0;
  return static_cast<uint8_t>(float_types_internal::Encode(fmt, f));
}

}  // namespace farcall

#endif  // FARCALL_CORE_FLOAT_TYPES_H_
