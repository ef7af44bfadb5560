#include "core/float_types.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace farcall {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

TEST(HalfTest, KnownValues) {
  EXPECT_EQ(FloatToHalf(1.0f), 0x3C00);
  EXPECT_EQ(FloatToHalf(-2.5f), 0xC100);
  EXPECT_EQ(FloatToHalf(0.0f), 0x0000);
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7BFF);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(FloatToHalf(kInf), 0x7C00);
  EXPECT_EQ(FloatToHalf(-kInf), 0xFC00);

  EXPECT_EQ(HalfToFloat(0x3C00), 1.0f);
  EXPECT_EQ(HalfToFloat(0xC100), -2.5f);
  EXPECT_EQ(HalfToFloat(0x7BFF), 65504.0f);
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(HalfToFloat(0x03FF), std::ldexp(1023.0f, -24));
  EXPECT_EQ(HalfToFloat(0x7C00), kInf);
  EXPECT_EQ(HalfToFloat(0xFC00), -kInf);
  EXPECT_TRUE(std::signbit(HalfToFloat(0x8000)));
}

TEST(HalfTest, RoundsToNearestEven) {
  // Between 2048 and 2050 (spacing 2): 2049 is a tie and goes to the even
  // mantissa (2048); 2051 is a tie and goes up to 2052.
  EXPECT_EQ(HalfToFloat(FloatToHalf(2049.0f)), 2048.0f);
  EXPECT_EQ(HalfToFloat(FloatToHalf(2051.0f)), 2052.0f);
  EXPECT_EQ(HalfToFloat(FloatToHalf(2049.5f)), 2050.0f);
  // Half of the smallest subnormal is a tie with zero: rounds to zero; a bit
  // more rounds up.
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -25)), 0x0000);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(FloatToHalf(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 ulp: tie -> 2
  // The largest subnormal rounds up into the smallest normal.
  EXPECT_EQ(FloatToHalf(std::ldexp(1023.75f, -24)), 0x0400);
  // Overflow: 65519 still rounds to max; 65520 is the tie to infinity.
  EXPECT_EQ(FloatToHalf(65519.0f), 0x7BFF);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7C00);
  EXPECT_EQ(FloatToHalf(1e10f), 0x7C00);
  EXPECT_EQ(FloatToHalf(-1e10f), 0xFC00);
}

TEST(HalfTest, NaN) {
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(kNaN))));
  EXPECT_TRUE(std::isnan(HalfToFloat(0x7E00)));
  EXPECT_TRUE(std::isnan(HalfToFloat(0x7C01)));  // signalling: still NaN
  EXPECT_TRUE(std::isnan(HalfToFloat(0xFE00)));
}

TEST(HalfTest, RoundTripsEveryFiniteValue) {
  for (uint32_t v = 0; v < 0x10000; ++v) {
    const float f = HalfToFloat(static_cast<uint16_t>(v));
    if (std::isnan(f)) continue;
    ASSERT_EQ(FloatToHalf(f), v) << std::hex << v;
  }
}

TEST(BF16Test, KnownValues) {
  EXPECT_EQ(FloatToBF16(1.0f), 0x3F80);
  EXPECT_EQ(FloatToBF16(-2.5f), 0xC020);
  EXPECT_EQ(FloatToBF16(-0.0f), 0x8000);
  EXPECT_EQ(FloatToBF16(kInf), 0x7F80);
  EXPECT_EQ(BF16ToFloat(0x3F80), 1.0f);
  EXPECT_EQ(BF16ToFloat(0xC020), -2.5f);
  EXPECT_EQ(BF16ToFloat(0x0001), std::ldexp(1.0f, -133));   // subnormal
  EXPECT_EQ(BF16ToFloat(0x7F7F), std::ldexp(255.0f, 120));  // max
}

TEST(BF16Test, RoundsToNearestEven) {
  // bfloat16 keeps 8 significant bits: 257 is a tie between 256 and 258 and
  // goes to the even mantissa (256); 259 goes to 260.
  EXPECT_EQ(BF16ToFloat(FloatToBF16(257.0f)), 256.0f);
  EXPECT_EQ(BF16ToFloat(FloatToBF16(259.0f)), 260.0f);
  EXPECT_EQ(BF16ToFloat(FloatToBF16(257.5f)), 258.0f);
  // The largest float32 rounds up to infinity.
  EXPECT_EQ(FloatToBF16(std::numeric_limits<float>::max()), 0x7F80);
}

TEST(BF16Test, NaNStaysNaN) {
  EXPECT_TRUE(std::isnan(BF16ToFloat(FloatToBF16(kNaN))));
  // A NaN whose payload lives only in the low 16 bits would truncate to
  // infinity; it must stay NaN.
  float low_payload_nan;
  const uint32_t bits = 0x7F800001u;
  std::memcpy(&low_payload_nan, &bits, sizeof(bits));
  ASSERT_TRUE(std::isnan(low_payload_nan));
  EXPECT_TRUE(std::isnan(BF16ToFloat(FloatToBF16(low_payload_nan))));
}

// Expected values below were produced by ml_dtypes 0.x:
//   np.array(vals, np.float32).astype(ml_dtypes.<type>).view(np.uint8)
struct F8Case {
  DType dtype;
  uint8_t one, minus_2_5, max, min_subnormal, min_normal, point3;
  float max_value, min_subnormal_value, min_normal_value;
  uint8_t overflow;  // encoding of 1.2 * max
  uint8_t nan;       // encoding of +NaN
};

const F8Case kF8Cases[] = {
    {DType::kF8E5M2, 0x3C, 0xC1, 0x7B, 0x01, 0x04, 0x35, 57344.0f, 1.52587890625e-05f,
     6.103515625e-05f, 0x7C, 0x7E},
    {DType::kF8E4M3FN, 0x38, 0xC2, 0x7E, 0x01, 0x08, 0x2A, 448.0f, 0.001953125f, 0.015625f, 0x7F,
     0x7F},
    {DType::kF8E4M3B11FNUZ, 0x58, 0xE2, 0x7F, 0x01, 0x08, 0x4A, 30.0f, 0.0001220703125f,
     0.0009765625f, 0x80, 0x80},
    {DType::kF8E5M2FNUZ, 0x40, 0xC5, 0x7F, 0x01, 0x04, 0x39, 57344.0f, 7.62939453125e-06f,
     3.0517578125e-05f, 0x80, 0x80},
    {DType::kF8E4M3FNUZ, 0x40, 0xCA, 0x7F, 0x01, 0x08, 0x32, 240.0f, 0.0009765625f, 0.0078125f,
     0x80, 0x80},
};

TEST(F8Test, KnownValuesMatchMlDtypes) {
  for (const F8Case& c : kF8Cases) {
    SCOPED_TRACE(DTypeName(c.dtype));
    EXPECT_EQ(FloatToF8(c.dtype, 1.0f), c.one);
    EXPECT_EQ(FloatToF8(c.dtype, -2.5f), c.minus_2_5);
    EXPECT_EQ(FloatToF8(c.dtype, c.max_value), c.max);
    EXPECT_EQ(FloatToF8(c.dtype, c.min_subnormal_value), c.min_subnormal);
    EXPECT_EQ(FloatToF8(c.dtype, 0.3f), c.point3);
    EXPECT_EQ(FloatToF8(c.dtype, c.max_value * 1.2f), c.overflow);
    EXPECT_EQ(FloatToF8(c.dtype, kNaN), c.nan);

    EXPECT_EQ(F8ToFloat(c.dtype, c.one), 1.0f);
    EXPECT_EQ(F8ToFloat(c.dtype, c.minus_2_5), -2.5f);
    EXPECT_EQ(F8ToFloat(c.dtype, c.max), c.max_value);
    EXPECT_EQ(F8ToFloat(c.dtype, c.min_subnormal), c.min_subnormal_value);
    EXPECT_EQ(FloatToF8(c.dtype, c.min_normal_value), c.min_normal);
    EXPECT_EQ(F8ToFloat(c.dtype, c.min_normal), c.min_normal_value);
    EXPECT_TRUE(std::isnan(F8ToFloat(c.dtype, c.nan)));
  }
}

TEST(F8Test, RoundsToNearestEven) {
  // With 3 mantissa bits the values next to 1 are 1 and 1.125: 1.0625 is a
  // tie that goes to 1 (even), 1.1875 a tie that goes to 1.25.
  for (DType d : {DType::kF8E4M3FN, DType::kF8E4M3FNUZ, DType::kF8E4M3B11FNUZ}) {
    SCOPED_TRACE(DTypeName(d));
    EXPECT_EQ(F8ToFloat(d, FloatToF8(d, 1.0625f)), 1.0f);
    EXPECT_EQ(F8ToFloat(d, FloatToF8(d, 1.1875f)), 1.25f);
    EXPECT_EQ(F8ToFloat(d, FloatToF8(d, 1.07f)), 1.125f);
  }
  // With 2 mantissa bits: 1.125 ties to 1, 1.375 ties to 1.5.
  for (DType d : {DType::kF8E5M2, DType::kF8E5M2FNUZ}) {
    SCOPED_TRACE(DTypeName(d));
    EXPECT_EQ(F8ToFloat(d, FloatToF8(d, 1.125f)), 1.0f);
    EXPECT_EQ(F8ToFloat(d, FloatToF8(d, 1.375f)), 1.5f);
  }
}

TEST(F8Test, SpecialValues) {
  // float8_e5m2 has infinities; the others turn them into NaN.
  EXPECT_EQ(FloatToF8(DType::kF8E5M2, kInf), 0x7C);
  EXPECT_EQ(FloatToF8(DType::kF8E5M2, -kInf), 0xFC);
  EXPECT_EQ(F8ToFloat(DType::kF8E5M2, 0x7C), kInf);
  EXPECT_EQ(FloatToF8(DType::kF8E4M3FN, kInf), 0x7F);
  EXPECT_EQ(FloatToF8(DType::kF8E4M3FN, -kInf), 0xFF);
  EXPECT_EQ(FloatToF8(DType::kF8E4M3FNUZ, -kInf), 0x80);
  // FN: 0x7F / 0xFF are NaN, 0x7E is 448 and 0x80 is -0.
  EXPECT_TRUE(std::isnan(F8ToFloat(DType::kF8E4M3FN, 0xFF)));
  EXPECT_TRUE(std::signbit(F8ToFloat(DType::kF8E4M3FN, 0x80)));
  EXPECT_EQ(FloatToF8(DType::kF8E4M3FN, -0.0f), 0x80);
  // FNUZ: no negative zero; 0xFF is an ordinary negative number.
  for (DType d : {DType::kF8E4M3FNUZ, DType::kF8E5M2FNUZ, DType::kF8E4M3B11FNUZ}) {
    SCOPED_TRACE(DTypeName(d));
    EXPECT_EQ(FloatToF8(d, -0.0f), 0x00);
    EXPECT_EQ(FloatToF8(d, -1e-30f), 0x00);
    EXPECT_TRUE(std::isnan(F8ToFloat(d, 0x80)));
    EXPECT_EQ(F8ToFloat(d, 0xFF), -F8ToFloat(d, 0x7F));
  }
  EXPECT_EQ(F8ToFloat(DType::kF8E4M3FNUZ, 0x55), 6.5f);
  EXPECT_EQ(F8ToFloat(DType::kF8E4M3B11FNUZ, 0x55), 0.8125f);
  EXPECT_EQ(F8ToFloat(DType::kF8E5M2FNUZ, 0x55), 40.0f);
  EXPECT_EQ(F8ToFloat(DType::kF8E4M3FN, 0x55), 13.0f);
  EXPECT_EQ(F8ToFloat(DType::kF8E5M2, 0x55), 80.0f);
}

TEST(F8Test, RoundTripsEveryValue) {
  for (const F8Case& c : kF8Cases) {
    SCOPED_TRACE(DTypeName(c.dtype));
    for (uint32_t v = 0; v < 256; ++v) {
      const float f = F8ToFloat(c.dtype, static_cast<uint8_t>(v));
      if (std::isnan(f)) continue;
      ASSERT_EQ(FloatToF8(c.dtype, f), v) << std::hex << v;
    }
  }
}

TEST(F8Test, NotAnF8DType) {
  EXPECT_FALSE(IsFloat8(DType::kF16));
  EXPECT_TRUE(IsFloat8(DType::kF8E4M3B11FNUZ));
  EXPECT_TRUE(std::isnan(F8ToFloat(DType::kF32, 0x38)));
  EXPECT_EQ(FloatToF8(DType::kF32, 1.0f), 0);
}

}  // namespace
}  // namespace farcall
