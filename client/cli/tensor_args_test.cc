#include "client/cli/tensor_args.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/cli/npy.h"
#include "core/dtype.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace farcall::cli {
namespace {

using ::testing::HasSubstr;

std::string Format(const HostTensor& t, int max_elements = 8) {
  return FormatTensor(t.spec, t.bytes.data(), t.bytes.size(), max_elements);
}

// ParseTensorArg then FormatTensor, or the error's message.
std::string Show(absl::string_view text, int max_elements = 8) {
  absl::StatusOr<HostTensor> t = ParseTensorArg(text);
  if (!t.ok()) return std::string(t.status().ToString());
  return Format(*t, max_elements);
}

template <typename T>
std::vector<T> As(const HostTensor& t) {
  std::vector<T> out(t.bytes.size() / sizeof(T));
  std::memcpy(out.data(), t.bytes.data(), out.size() * sizeof(T));
  return out;
}

void ExpectInvalid(absl::string_view text, absl::string_view why = "") {
  absl::StatusOr<HostTensor> t = ParseTensorArg(text);
  ASSERT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << text << ": " << t.status();
  EXPECT_THAT(std::string(t.status().message()), HasSubstr(absl::StrCat("'", text, "'")));
  EXPECT_THAT(std::string(t.status().message()), HasSubstr(std::string(why)));
}

TEST(ParseTensorArgTest, FillsIotaByDefault) {
  EXPECT_EQ(Show("float32[4]"), "float32[4] [0, 1, 2, 3]");
  EXPECT_EQ(Show("float32[2,2]:iota"), "float32[2,2] [0, 1, 2, 3]");
  EXPECT_EQ(Show("bool[3]"), "bool[3] [false, true, false]");
  EXPECT_EQ(Show("int32[]"), "int32[] 0");
  EXPECT_EQ(Show("complex64[2]"), "complex64[2] [(0+0j), (1+0j)]");
  // Integers wrap like numpy's casts.
  absl::StatusOr<HostTensor> t = ParseTensorArg("int8[300]");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(As<int8_t>(*t)[200], -56);
}

TEST(ParseTensorArgTest, EveryDTypeTakesEveryFill) {
  for (DType d : AllDTypes()) {
    for (const char* fill : {"iota", "zeros", "ones", "random", "1", "true"}) {
      std::string text = absl::StrCat(DTypeName(d), "[2,3]:", fill);
      SCOPED_TRACE(text);
      absl::StatusOr<HostTensor> t = ParseTensorArg(text);
      ASSERT_TRUE(t.ok()) << t.status();
      EXPECT_EQ(t->spec, (TensorSpec{d, {2, 3}}));
      EXPECT_EQ(t->bytes.size(), static_cast<size_t>(6 * ItemSize(d)));
    }
    std::string ones = Show(absl::StrCat(DTypeName(d), "[2]:ones"));
    std::string zeros = Show(absl::StrCat(DTypeName(d), "[2]:zeros"));
    std::string prefix = absl::StrCat(DTypeName(d), "[2] ");
    if (d == DType::kPred) {
      EXPECT_EQ(ones, prefix + "[true, true]");
      EXPECT_EQ(zeros, prefix + "[false, false]");
    } else if (IsComplex(d)) {
      EXPECT_EQ(ones, prefix + "[(1+0j), (1+0j)]");
      EXPECT_EQ(zeros, prefix + "[(0+0j), (0+0j)]");
    } else {
      EXPECT_EQ(ones, prefix + "[1, 1]");
      EXPECT_EQ(zeros, prefix + "[0, 0]");
    }
    std::string iota = Show(absl::StrCat(DTypeName(d), "[4]"));
    if (d != DType::kPred && !IsComplex(d)) {
      EXPECT_EQ(iota, absl::StrCat(DTypeName(d), "[4] [0, 1, 2, 3]"));
    }
  }
}

TEST(ParseTensorArgTest, FillsNumbers) {
  EXPECT_EQ(Show("float32[2]:2.5"), "float32[2] [2.5, 2.5]");
  EXPECT_EQ(Show("int32[]:-3"), "int32[] -3");
  EXPECT_EQ(Show("int32[1]:1e3"), "int32[1] [1000]");
  EXPECT_EQ(Show("bool[2]:true"), "bool[2] [true, true]");
  EXPECT_EQ(Show("bool[1]:0"), "bool[1] [false]");
  EXPECT_EQ(Show("float64[1]:true"), "float64[1] [1]");
  EXPECT_EQ(Show("float16[1]:0.1"), "float16[1] [0.0999756]");
  EXPECT_EQ(Show("bfloat16[1]:-1.5"), "bfloat16[1] [-1.5]");
  EXPECT_EQ(Show("float8_e4m3fn[1]:0.5"), "float8_e4m3fn[1] [0.5]");
  EXPECT_EQ(Show("complex64[1]:2.5"), "complex64[1] [(2.5+0j)]");
  EXPECT_EQ(Show("complex128[1]:-1"), "complex128[1] [(-1+0j)]");
  EXPECT_EQ(Show("float32[2]:-inf"), "float32[2] [-inf, -inf]");
  EXPECT_EQ(Show("float32[1]:nan"), "float32[1] [nan]");
  EXPECT_EQ(Show("uint64[1]:18446744073709551615"), "uint64[1] [18446744073709551615]");
  EXPECT_EQ(Show("int64[1]:-9223372036854775808"), "int64[1] [-9223372036854775808]");
  EXPECT_EQ(Show("int8[2]:-128"), "int8[2] [-128, -128]");
  EXPECT_EQ(Show("uint16[1]:65535"), "uint16[1] [65535]");
}

TEST(ParseTensorArgTest, RejectsNumbersThatDoNotFit) {
  ExpectInvalid("int8[1]:128", "does not fit int8");
  ExpectInvalid("int8[1]:-129", "does not fit int8");
  ExpectInvalid("uint8[1]:-1", "does not fit uint8");
  ExpectInvalid("uint32[1]:4294967296", "does not fit uint32");
  ExpectInvalid("int64[1]:9223372036854775808", "does not fit int64");
  ExpectInvalid("int32[1]:2.5", "not a whole number");
  ExpectInvalid("int32[1]:1e10", "does not fit int32");
  ExpectInvalid("bool[1]:2", "does not fit bool");
  ExpectInvalid("bool[1]:0.5", "not a whole number");
}

TEST(ParseTensorArgTest, RandomIsDeterministicAndSmall) {
  absl::StatusOr<HostTensor> a = ParseTensorArg("float32[1000]:random");
  absl::StatusOr<HostTensor> b = ParseTensorArg("float32[1000]:random");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->bytes, b->bytes);
  float lo = 1, hi = -1;
  for (float v : As<float>(*a)) {
    EXPECT_GE(v, -1.0f);
    EXPECT_LT(v, 1.0f);
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  EXPECT_LT(lo, -0.9f);  // it does spread over the range
  EXPECT_GT(hi, 0.9f);

  absl::StatusOr<HostTensor> i = ParseTensorArg("int32[1000]:random");
  ASSERT_TRUE(i.ok());
  for (int32_t v : As<int32_t>(*i)) {
    EXPECT_GE(v, -8);
    EXPECT_LE(v, 8);
  }
  absl::StatusOr<HostTensor> u = ParseTensorArg("uint8[1000]:random");
  ASSERT_TRUE(u.ok());
  for (uint8_t v : u->bytes) EXPECT_LE(v, 16);
  absl::StatusOr<HostTensor> p = ParseTensorArg("bool[1000]:random");
  ASSERT_TRUE(p.ok());
  int trues = 0;
  for (uint8_t v : p->bytes) {
    EXPECT_LE(v, 1);
    trues += v;
  }
  EXPECT_GT(trues, 400);
  EXPECT_LT(trues, 600);
}

TEST(ParseTensorArgTest, ReadsNpyFiles) {
  std::string path = ::testing::TempDir() + "/tensor_args_test.npy";
  uint16_t bits[2] = {0x3f80, 0xc020};  // bfloat16 1 and -2.5
  ASSERT_TRUE(WriteNpy(path, {DType::kBF16, {2}}, bits, sizeof(bits)).ok());
  EXPECT_EQ(Show(path), "uint16[2] [16256, 49184]");
  EXPECT_EQ(Show(path + ":bfloat16"), "bfloat16[2] [1, -2.5]");
  EXPECT_EQ(Show(path + ":float16"), "float16[2] [1.875, -2.0625]");

  absl::StatusOr<HostTensor> t = ParseTensorArg(path + ":float32");
  ASSERT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(t.status().message()), HasSubstr(path));

  ExpectInvalid(path + ":float33", "unknown dtype 'float33'");

  std::string missing = ::testing::TempDir() + "/no_such_file.npy";
  t = ParseTensorArg(missing);
  ASSERT_EQ(t.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(t.status().message()), HasSubstr(missing));
}

TEST(ParseTensorArgTest, RejectsBadText) {
  ExpectInvalid("");
  ExpectInvalid("float32", "no [dims]");
  ExpectInvalid("float33[4]", "unknown dtype");
  ExpectInvalid("float32[-1]", "bad dim");
  ExpectInvalid("float32[4]:", "expected ':FILL'");
  ExpectInvalid("float32[4]x", "expected ':FILL'");
  ExpectInvalid("float32[4]:banana", "unknown fill 'banana'");
  ExpectInvalid("float32[1000000,1000000]", "too large");
  ExpectInvalid("float32[4611686018427387904,4]", "overflows");
}

TEST(FormatTensorTest, ElidesTheMiddle) {
  EXPECT_EQ(Show("int8[100]"), "int8[100] [0, 1, 2, 3, ..., 96, 97, 98, 99]");
  EXPECT_EQ(Show("int8[100]", 3), "int8[100] [0, 1, ..., 99]");
  EXPECT_EQ(Show("int8[100]", 1), "int8[100] [0, ...]");
  EXPECT_EQ(Show("int8[100]", 0), "int8[100] [...]");
  EXPECT_EQ(Show("int8[8]"), "int8[8] [0, 1, 2, 3, 4, 5, 6, 7]");
  EXPECT_EQ(Show("int8[9]"), "int8[9] [0, 1, 2, 3, ..., 5, 6, 7, 8]");
  EXPECT_EQ(Show("float32[0,4]"), "float32[0,4] []");
}

TEST(FormatTensorTest, FormatsValues) {
  float f[3] = {1.0f / 3.0f, 1e10f, -0.0f};
  EXPECT_EQ(FormatTensor({DType::kF32, {3}}, f, sizeof(f)), "float32[3] [0.333333, 1e+10, -0]");
  float c[4] = {1, -2, 0.5f, 3};
  EXPECT_EQ(FormatTensor({DType::kC64, {2}}, c, sizeof(c)), "complex64[2] [(1-2j), (0.5+3j)]");
  double z[2] = {std::nan(""), std::numeric_limits<double>::infinity()};
  EXPECT_EQ(FormatTensor({DType::kC128, {}}, z, sizeof(z)), "complex128[] (nan+infj)");
  int16_t s[2] = {-32768, 32767};
  EXPECT_EQ(FormatTensor({DType::kS16, {2}}, s, sizeof(s)), "int16[2] [-32768, 32767]");
  uint32_t u = 4294967295u;
  EXPECT_EQ(FormatTensor({DType::kU32, {}}, &u, sizeof(u)), "uint32[] 4294967295");
}

TEST(FormatTensorTest, SaysWhenTheSizeIsWrong) {
  float f[3] = {};
  EXPECT_EQ(FormatTensor({DType::kF32, {4}}, f, sizeof(f)), "float32[4] <12 bytes; expected 16>");
}

TEST(ParseAliasTest, ParsesInputAndOutput) {
  absl::StatusOr<std::pair<uint32_t, uint32_t>> a = ParseAlias("0:1");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(*a, std::make_pair(0u, 1u));
  a = ParseAlias("4294967295:12");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(*a, std::make_pair(4294967295u, 12u));
  for (const char* bad :
       {"", "1", ":1", "1:", "a:b", "-1:0", "1:2:3", " 1:2", "+1:2", "4294967296:0"}) {
    a = ParseAlias(bad);
    ASSERT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(a.status().message()), HasSubstr(absl::StrCat("'", bad, "'")));
  }
}

TEST(ParseAttrTest, PicksTheType) {
  auto parse = [](absl::string_view text) {
    absl::StatusOr<std::pair<std::string, AttrValue>> a = ParseAttr(text);
    EXPECT_TRUE(a.ok()) << text << ": " << a.status();
    return a.ok() ? *a : std::make_pair(std::string(), AttrValue());
  };
  using P = std::pair<std::string, AttrValue>;
  EXPECT_EQ(parse("n=3"), (P{"n", int64_t{3}}));
  EXPECT_EQ(parse("n=-9223372036854775808"), (P{"n", std::numeric_limits<int64_t>::min()}));
  EXPECT_EQ(parse("x=2.5"), (P{"x", 2.5}));
  EXPECT_EQ(parse("x=1e-3"), (P{"x", 1e-3}));
  EXPECT_EQ(parse("x=-2."), (P{"x", -2.0}));
  EXPECT_EQ(parse("b=true"), (P{"b", true}));
  EXPECT_EQ(parse("b=false"), (P{"b", false}));
  EXPECT_EQ(parse("s=str:12"), (P{"s", std::string("12")}));
  EXPECT_EQ(parse("s=str:"), (P{"s", std::string()}));
  EXPECT_EQ(parse("mode=fast"), (P{"mode", std::string("fast")}));
  EXPECT_EQ(parse("v=1.2.3"), (P{"v", std::string("1.2.3")}));
  EXPECT_EQ(parse("v=inf"), (P{"v", std::string("inf")}));
  EXPECT_EQ(parse("e="), (P{"e", std::string()}));
  EXPECT_EQ(parse("eq=a=b"), (P{"eq", std::string("a=b")}));
}

TEST(ParseAttrTest, RejectsBadText) {
  for (const char* bad : {"", "noequals", "=3", "a b=1", "big=99999999999999999999"}) {
    absl::StatusOr<std::pair<std::string, AttrValue>> a = ParseAttr(bad);
    ASSERT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(a.status().message()), HasSubstr(absl::StrCat("'", bad, "'")));
  }
}

}  // namespace
}  // namespace farcall::cli
