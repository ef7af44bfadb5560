// The bit-level conversions behind core/float_types.h: float32 to and from
// a small float format given by its field widths (IEEE binary16, bfloat16
// and the 8-bit floats of ml_dtypes). Free of every farcall type and usable
// in CUDA and HIP device code (FARCALL_HD), so host handlers and device
// kernels round alike. See float_types.h for the rounding and overflow rules.
//
//   float f = farcall::float_types_internal::Decode(
//       farcall::float_types_internal::kF8E4M3FNFormat, 0x38);  // 1.0f
#ifndef FARCALL_CORE_FLOAT_FORMATS_H_
#define FARCALL_CORE_FLOAT_FORMATS_H_

#include <cstdint>

#if defined(__CUDACC__) || defined(__HIP__)
#define FARCALL_HD __host__ __device__
#else
#define FARCALL_HD
#endif

namespace farcall {

namespace float_types_internal {

FARCALL_HD inline uint32_t FloatBits(float f) { return __builtin_bit_cast(uint32_t, f); }

FARCALL_HD inline float BitsToFloat(uint32_t u) { return __builtin_bit_cast(float, u); }

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
// The five 8-bit float formats of ml_dtypes.
inline constexpr MiniFormat kF8E5M2Format{5, 2, 15, NanStyle::kIeee};
inline constexpr MiniFormat kF8E4M3FNFormat{4, 3, 7, NanStyle::kFn};
inline constexpr MiniFormat kF8E4M3B11FNUZFormat{4, 3, 11, NanStyle::kFnuz};
inline constexpr MiniFormat kF8E5M2FNUZFormat{5, 2, 16, NanStyle::kFnuz};
inline constexpr MiniFormat kF8E4M3FNUZFormat{4, 3, 8, NanStyle::kFnuz};

// 2^k for -126 <= k <= 127, built from bits: this header avoids <cmath>.
FARCALL_HD inline float Pow2(int k) { return BitsToFloat(static_cast<uint32_t>(k + 127) << 23); }

FARCALL_HD inline float Decode(MiniFormat fmt, uint32_t v) {
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
                                  : (sign32 | 0x7FC00000u | (m << (23 - fmt.man_bits))));
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
    const float r = static_cast<float>(m) * Pow2(1 - fmt.bias - fmt.man_bits);
    return sign != 0 ? -r : r;
  }
  // Every normal narrow value is a normal float32: just move the fields.
  return BitsToFloat(sign32 | (static_cast<uint32_t>(static_cast<int>(e) - fmt.bias + 127) << 23) |
                     (m << (23 - fmt.man_bits)));
}

FARCALL_HD inline uint32_t Encode(MiniFormat fmt, float f) {
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
    uint32_t r = (abs + ((1u << (shift - 1)) - 1) + ((abs >> shift) & 1u)) >> shift;
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
    mag = sh > 24 ? 0 : (sig + ((1u << (sh - 1)) - 1) + ((sig >> sh) & 1u)) >> sh;
  }
  if (mag == 0 && fmt.nan == NanStyle::kFnuz) return 0;  // no -0
  return sign_out | mag;
}

}  // namespace float_types_internal

// IEEE binary16 <-> float32.
FARCALL_HD inline float HalfToFloat(uint16_t h) {
  return float_types_internal::Decode(float_types_internal::kHalfFormat, h);
}
FARCALL_HD inline uint16_t FloatToHalf(float f) {
  return static_cast<uint16_t>(float_types_internal::Encode(float_types_internal::kHalfFormat, f));
}

// bfloat16 <-> float32. bfloat16 is the top half of a float32.
FARCALL_HD inline float BF16ToFloat(uint16_t b) {
  return float_types_internal::BitsToFloat(static_cast<uint32_t>(b) << 16);
}
FARCALL_HD inline uint16_t FloatToBF16(float f) {
  const uint32_t u = float_types_internal::FloatBits(f);
  // Truncating a NaN could clear every mantissa bit left and make infinity;
  // setting the quiet bit keeps it a NaN.
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) {
    return static_cast<uint16_t>((u >> 16) | 0x40u);
  }
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

}  // namespace farcall

#endif  // FARCALL_CORE_FLOAT_FORMATS_H_
