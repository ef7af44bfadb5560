#include "core/tensor_spec.h"

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace farcall {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

TensorSpec Spec(DType d, std::vector<int64_t> dims) {
  TensorSpec s;
  s.dtype = d;
  s.dims = std::move(dims);
  return s;
}

TEST(TensorSpecTest, Equality) {
  EXPECT_EQ(Spec(DType::kF32, {4, 8}), Spec(DType::kF32, {4, 8}));
  EXPECT_NE(Spec(DType::kF32, {4, 8}), Spec(DType::kF32, {8, 4}));
  EXPECT_NE(Spec(DType::kF32, {4, 8}), Spec(DType::kS32, {4, 8}));
  EXPECT_NE(Spec(DType::kF32, {}), Spec(DType::kF32, {1}));
}

TEST(TensorSpecTest, ElementCount) {
  EXPECT_EQ(ElementCount(Spec(DType::kF32, {})), 1);
  EXPECT_EQ(ElementCount(Spec(DType::kF32, {4, 8})), 32);
  EXPECT_EQ(ElementCount(Spec(DType::kF32, {4, 0, 8})), 0);
}

TEST(ByteSizeTest, Scalar) {
  absl::StatusOr<int64_t> b = ByteSize(Spec(DType::kF32, {}), "args[0]");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(*b, 4);
  b = ByteSize(Spec(DType::kC128, {}), "args[0]");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(*b, 16);
}

TEST(ByteSizeTest, ZeroDim) {
  absl::StatusOr<int64_t> b = ByteSize(Spec(DType::kF64, {0}), "args[0]");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(*b, 0);
  b = ByteSize(Spec(DType::kF64, {3, 0, 5}), "args[0]");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(*b, 0);
}

TEST(ByteSizeTest, Normal) {
  absl::StatusOr<int64_t> b = ByteSize(Spec(DType::kF32, {4, 8}), "args[0]");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(*b, 128);
  b = ByteSize(Spec(DType::kBF16, {3, 5, 7}), "results[1]");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(*b, 2 * 3 * 5 * 7);
  b = ByteSize(Spec(DType::kPred, {10}), "x");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(*b, 10);
}

TEST(ByteSizeTest, ExactlyInt64MaxIsNotOverflow) {
  absl::StatusOr<int64_t> b = ByteSize(Spec(DType::kS8, {kMax}), "args[0]");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(*b, kMax);
}

TEST(ByteSizeTest, NegativeDimNamesIndexAndValue) {
  absl::StatusOr<int64_t> b = ByteSize(Spec(DType::kF32, {4, -3, 2}), "args[2]");
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(b.status().message(), "args[2] has negative dim -3 at index 1.");
}

TEST(ByteSizeTest, NegativeDimReportedEvenWithZeroAndHugeDims) {
  // The negative dim is the real problem, not the (would-be) overflow.
  absl::StatusOr<int64_t> b = ByteSize(Spec(DType::kF32, {kMax, kMax, -1}), "results[0]");
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(b.status().message(), HasSubstr("results[0]"));
  EXPECT_THAT(b.status().message(), HasSubstr("negative dim -1 at index 2"));
}

TEST(ByteSizeTest, UnknownDTypeNamesTheNumber) {
  absl::StatusOr<int64_t> b = ByteSize(Spec(static_cast<DType>(13), {4}), "args[1]");
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(b.status().message(), "args[1] has unknown dtype 13.");

  b = ByteSize(Spec(DType::kInvalid, {}), "results[0]");
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(b.status().message(), "results[0] has unknown dtype 0.");
}

TEST(ByteSizeTest, OverflowNamesTheDim) {
  const int64_t big = int64_t{1} << 40;
  absl::StatusOr<int64_t> b = ByteSize(Spec(DType::kF32, {big, big}), "args[0]");
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(b.status().message(),
            "args[0] float32[1099511627776,1099511627776] has a byte size that "
            "overflows int64 at dim 1 (1099511627776).");
}

TEST(ByteSizeTest, OverflowByItemSizeAlone) {
  // kMax elements fit int64 but kMax * 8 bytes do not.
  absl::StatusOr<int64_t> b = ByteSize(Spec(DType::kF64, {kMax}), "args[3]");
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(b.status().message(), HasSubstr("args[3]"));
  EXPECT_THAT(b.status().message(), HasSubstr("overflows int64 at dim 0"));
  EXPECT_THAT(b.status().message(), HasSubstr("(9223372036854775807)"));
}

TEST(ByteSizeTest, ZeroDimWithHugeOtherDimsIsZeroBytes) {
  for (const std::vector<int64_t>& dims :
       std::vector<std::vector<int64_t>>{{kMax, kMax, 0},
                                         {0, kMax, kMax},
                                         {kMax, 0, kMax},
                                         {int64_t{1} << 40, int64_t{1} << 40, 0}}) {
    absl::StatusOr<int64_t> b = ByteSize(Spec(DType::kC128, dims), "args[0]");
    ASSERT_TRUE(b.ok()) << SpecToString(Spec(DType::kC128, dims)) << ": " << b.status();
    EXPECT_EQ(*b, 0) << SpecToString(Spec(DType::kC128, dims));
  }
}

TEST(SpecToStringTest, Formats) {
  EXPECT_EQ(SpecToString(Spec(DType::kF32, {4, 8})), "float32[4,8]");
  EXPECT_EQ(SpecToString(Spec(DType::kS32, {})), "int32[]");
  EXPECT_EQ(SpecToString(Spec(DType::kBF16, {0})), "bfloat16[0]");
  EXPECT_EQ(SpecToString(Spec(DType::kPred, {1, 2, 3})), "bool[1,2,3]");
  EXPECT_EQ(SpecToString(Spec(DType::kF8E4M3FN, {7})), "float8_e4m3fn[7]");
  EXPECT_EQ(SpecToString(Spec(DType::kInvalid, {2})), "invalid[2]");
}

TEST(ParseTensorSpecTest, Good) {
  absl::StatusOr<TensorSpec> s = ParseTensorSpec("float32[4,8]");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(*s, Spec(DType::kF32, {4, 8}));

  s = ParseTensorSpec("int32[]");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(*s, Spec(DType::kS32, {}));

  s = ParseTensorSpec("bfloat16[0,3]");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(*s, Spec(DType::kBF16, {0, 3}));

  s = ParseTensorSpec("float8_e4m3b11fnuz[1, 2 ,3]");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(*s, Spec(DType::kF8E4M3B11FNUZ, {1, 2, 3}));
}

TEST(ParseTensorSpecTest, RoundTripsSpecToStringForAllDTypes) {
  for (DType d : AllDTypes()) {
    for (const std::vector<int64_t>& dims :
         std::vector<std::vector<int64_t>>{{}, {0}, {4, 8}, {1, 2, 3, 4}}) {
      TensorSpec spec = Spec(d, dims);
      absl::StatusOr<TensorSpec> back = ParseTensorSpec(SpecToString(spec));
      ASSERT_TRUE(back.ok()) << SpecToString(spec) << ": " << back.status();
      EXPECT_EQ(*back, spec) << SpecToString(spec);
    }
  }
}

void ExpectBad(const std::string& text, const std::string& why) {
  absl::StatusOr<TensorSpec> s = ParseTensorSpec(text);
  ASSERT_FALSE(s.ok()) << "'" << text << "' parsed";
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << text;
  EXPECT_THAT(s.status().message(), HasSubstr("'" + text + "'")) << text;
  EXPECT_THAT(s.status().message(), HasSubstr(why)) << text;
}

TEST(ParseTensorSpecTest, Bad) {
  ExpectBad("", "no [dims]");
  ExpectBad("float32", "no [dims]");
  ExpectBad("float32[4", "no [dims]");
  ExpectBad("float32[4]x", "no [dims]");
  ExpectBad("float32(4)", "no [dims]");
  ExpectBad("[4]", "unknown dtype ''");
  ExpectBad("f32[4]", "unknown dtype 'f32'");
  ExpectBad("Float32[4]", "unknown dtype 'Float32'");
  ExpectBad("float32[a]", "bad dim 'a'");
  ExpectBad("float32[-1]", "bad dim '-1'");
  ExpectBad("float32[4,]", "bad dim ''");
  ExpectBad("float32[,4]", "bad dim ''");
  ExpectBad("float32[4,,8]", "bad dim ''");
  ExpectBad("float32[1.5]", "bad dim '1.5'");
  ExpectBad("float32[99999999999999999999]", "bad dim");
  ExpectBad("float32[4]]", "bad dim");
}

TEST(ParseTensorSpecTest, BadMessageSaysWhatIsExpected) {
  absl::StatusOr<TensorSpec> s = ParseTensorSpec("float32");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().message(),
            "bad tensor spec 'float32': no [dims] (expected DTYPE[D0,D1,...], "
            "such as float32[4,8] or int32[])");
}

}  // namespace
}  // namespace farcall
