#include "core/dtype.h"

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace farcall {
namespace {

// Each dtype with XLA's PrimitiveType number, its item size, its numpy name
// and its kind, written out independently of dtype.cc.
struct Expected {
  DType dtype;
  int32_t number;
  int64_t item_size;
  const char* name;
  DTypeKind kind;
};

const std::vector<Expected>& Table() {
  static const std::vector<Expected> t = {
      {DType::kPred, 1, 1, "bool", DTypeKind::kBool},
      {DType::kS8, 2, 1, "int8", DTypeKind::kSigned},
      {DType::kS16, 3, 2, "int16", DTypeKind::kSigned},
      {DType::kS32, 4, 4, "int32", DTypeKind::kSigned},
      {DType::kS64, 5, 8, "int64", DTypeKind::kSigned},
      {DType::kU8, 6, 1, "uint8", DTypeKind::kUnsigned},
      {DType::kU16, 7, 2, "uint16", DTypeKind::kUnsigned},
      {DType::kU32, 8, 4, "uint32", DTypeKind::kUnsigned},
      {DType::kU64, 9, 8, "uint64", DTypeKind::kUnsigned},
      {DType::kF16, 10, 2, "float16", DTypeKind::kFloat},
      {DType::kF32, 11, 4, "float32", DTypeKind::kFloat},
      {DType::kF64, 12, 8, "float64", DTypeKind::kFloat},
      {DType::kC64, 15, 8, "complex64", DTypeKind::kComplex},
      {DType::kBF16, 16, 2, "bfloat16", DTypeKind::kFloat},
      {DType::kC128, 18, 16, "complex128", DTypeKind::kComplex},
      {DType::kF8E5M2, 19, 1, "float8_e5m2", DTypeKind::kFloat},
      {DType::kF8E4M3FN, 20, 1, "float8_e4m3fn", DTypeKind::kFloat},
      {DType::kF8E4M3B11FNUZ, 23, 1, "float8_e4m3b11fnuz", DTypeKind::kFloat},
      {DType::kF8E5M2FNUZ, 24, 1, "float8_e5m2fnuz", DTypeKind::kFloat},
      {DType::kF8E4M3FNUZ, 25, 1, "float8_e4m3fnuz", DTypeKind::kFloat},
  };
  return t;
}

TEST(DTypeTest, WireNumbersMatchXlaPrimitiveType) {
  for (const Expected& e : Table()) {
    SCOPED_TRACE(e.name);
    EXPECT_EQ(static_cast<int32_t>(e.dtype), e.number);
    std::optional<DType> d = DTypeFromNumber(e.number);
    ASSERT_TRUE(d.has_value());
    EXPECT_EQ(*d, e.dtype);
  }
  EXPECT_EQ(static_cast<int32_t>(DType::kInvalid), 0);
}

TEST(DTypeTest, ItemSizes) {
  for (const Expected& e : Table()) {
    SCOPED_TRACE(e.name);
    EXPECT_EQ(ItemSize(e.dtype), e.item_size);
  }
  EXPECT_EQ(ItemSize(DType::kInvalid), 0);
  EXPECT_EQ(ItemSize(static_cast<DType>(13)), 0);
}

TEST(DTypeTest, NumpyNames) {
  for (const Expected& e : Table()) {
    EXPECT_EQ(std::string(DTypeName(e.dtype)), e.name);
  }
  EXPECT_EQ(std::string(DTypeName(DType::kInvalid)), "invalid");
  EXPECT_EQ(std::string(DTypeName(static_cast<DType>(99))), "invalid");
}

TEST(DTypeTest, Kinds) {
  for (const Expected& e : Table()) {
    SCOPED_TRACE(e.name);
    EXPECT_EQ(KindOf(e.dtype), e.kind);
    EXPECT_EQ(IsFloating(e.dtype), e.kind == DTypeKind::kFloat);
    EXPECT_EQ(IsComplex(e.dtype), e.kind == DTypeKind::kComplex);
    EXPECT_EQ(IsNumeric(e.dtype), e.kind != DTypeKind::kBool);
  }
  EXPECT_FALSE(IsNumeric(DType::kPred));
  EXPECT_TRUE(IsNumeric(DType::kU8));
  EXPECT_TRUE(IsFloating(DType::kBF16));
  EXPECT_TRUE(IsComplex(DType::kC128));
}

TEST(DTypeTest, AllDTypesIsEveryKnownDTypeInWireOrder) {
  const std::vector<DType>& all = AllDTypes();
  ASSERT_EQ(all.size(), Table().size());
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(all[i], Table()[i].dtype) << "at " << i;
    if (i > 0) {
      EXPECT_LT(static_cast<int32_t>(all[i - 1]), static_cast<int32_t>(all[i]));
    }
  }
  EXPECT_THAT(all, ::testing::Not(::testing::Contains(DType::kInvalid)));
}

TEST(DTypeTest, NameRoundTripForAllDTypes) {
  std::set<std::string> names;
  for (DType d : AllDTypes()) {
    std::string name(DTypeName(d));
    EXPECT_TRUE(names.insert(name).second) << "duplicate name " << name;
    std::optional<DType> back = DTypeFromName(name);
    ASSERT_TRUE(back.has_value()) << name;
    EXPECT_EQ(*back, d) << name;
    // And through the number.
    std::optional<DType> by_number = DTypeFromNumber(static_cast<int32_t>(d));
    ASSERT_TRUE(by_number.has_value());
    EXPECT_EQ(*by_number, d);
  }
}

TEST(DTypeTest, UnknownNamesRejected) {
  EXPECT_EQ(DTypeFromName(""), std::nullopt);
  EXPECT_EQ(DTypeFromName("invalid"), std::nullopt);
  EXPECT_EQ(DTypeFromName("float"), std::nullopt);
  EXPECT_EQ(DTypeFromName("f32"), std::nullopt);
  EXPECT_EQ(DTypeFromName("F32"), std::nullopt);
  EXPECT_EQ(DTypeFromName("Float32"), std::nullopt);
  EXPECT_EQ(DTypeFromName("float32 "), std::nullopt);
  EXPECT_EQ(DTypeFromName("pred"), std::nullopt);
}

TEST(DTypeTest, UnknownNumbersRejected) {
  for (int32_t n : {0, 13, 14, 17, 21, 22, 26, 99, -1}) {
    EXPECT_EQ(DTypeFromNumber(n), std::nullopt) << n;
  }
}

}  // namespace
}  // namespace farcall
