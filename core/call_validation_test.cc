#include "core/call_validation.h"

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace farcall {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

TensorSpec Spec(DType d, std::vector<int64_t> dims) {
  TensorSpec s;
  s.dtype = d;
  s.dims = std::move(dims);
  return s;
}

// A valid call: copy of two float32[4,8] tensors on cpu.
CallDescriptor GoodCall() {
  CallDescriptor c;
  c.handler = "copy";
  c.platforms = {"cpu"};
  c.args = {Spec(DType::kF32, {4, 8}), Spec(DType::kF32, {4, 8})};
  c.results = {Spec(DType::kF32, {4, 8}), Spec(DType::kF32, {4, 8})};
  return c;
}

void ExpectError(const absl::StatusOr<ValidatedCall>& v, absl::StatusCode code,
                 const std::string& message) {
  ASSERT_FALSE(v.ok()) << "expected: " << message;
  EXPECT_EQ(v.status().code(), code) << v.status();
  EXPECT_EQ(v.status().message(), message);
}

// ---- Platforms ----

TEST(ValidateCallTest, GoodCall) {
  absl::StatusOr<ValidatedCall> v = ValidateCall(GoodCall());
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->platform, Platform::kCpu);
  EXPECT_THAT(v->arg_bytes, ElementsAre(128, 128));
  EXPECT_THAT(v->result_bytes, ElementsAre(128, 128));
  EXPECT_EQ(v->footprint_bytes, 512);
  EXPECT_THAT(v->result_alias, ElementsAre(-1, -1));
}

TEST(ValidateCallTest, NoPlatform) {
  CallDescriptor c = GoodCall();
  c.platforms.clear();
  absl::StatusOr<ValidatedCall> v = ValidateCall(c);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(v.status().message(), HasSubstr("exactly one platform"));
  EXPECT_EQ(v.status().message(),
            "buffer_callback needs exactly one platform; the call names none.");
}

TEST(ValidateCallTest, MoreThanOnePlatform) {
  CallDescriptor c = GoodCall();
  c.platforms = {"cpu", "cuda"};
  ExpectError(ValidateCall(c), absl::StatusCode::kUnimplemented,
              "multi-platform lowering for buffer_callback");
  // Even when one of them is unsupported: the count is checked first.
  c.platforms = {"tpu", "cpu", "rocm"};
  ExpectError(ValidateCall(c), absl::StatusCode::kUnimplemented,
              "multi-platform lowering for buffer_callback");
  // And even for the same platform twice.
  c.platforms = {"cpu", "cpu"};
  ExpectError(ValidateCall(c), absl::StatusCode::kUnimplemented,
              "multi-platform lowering for buffer_callback");
}

TEST(ValidateCallTest, UnsupportedPlatformKeepsCallersSpelling) {
  CallDescriptor c = GoodCall();
  c.platforms = {"tpu"};
  ExpectError(ValidateCall(c), absl::StatusCode::kInvalidArgument,
              "`buffer_callback` not supported on tpu backend.");
  c.platforms = {"TPU"};
  ExpectError(ValidateCall(c), absl::StatusCode::kInvalidArgument,
              "`buffer_callback` not supported on TPU backend.");
  c.platforms = {"Metal"};
  ExpectError(ValidateCall(c), absl::StatusCode::kInvalidArgument,
              "`buffer_callback` not supported on Metal backend.");
  c.platforms = {""};
  ExpectError(ValidateCall(c), absl::StatusCode::kInvalidArgument,
              "`buffer_callback` not supported on  backend.");
  c.platforms = {"cpu "};
  ExpectError(ValidateCall(c), absl::StatusCode::kInvalidArgument,
              "`buffer_callback` not supported on cpu  backend.");
}

TEST(ValidateCallTest, PlatformCheckedBeforeEverythingElse) {
  CallDescriptor c = GoodCall();
  c.platforms = {"tpu"};
  c.handler = "";
  c.args = {Spec(DType::kF32, {-1})};
  c.aliases = {{7, 7}};
  ExpectError(ValidateCall(c), absl::StatusCode::kInvalidArgument,
              "`buffer_callback` not supported on tpu backend.");
}

TEST(ValidateCallTest, GpuIsAcceptedAsCudaOrRocm) {
  for (const char* name : {"gpu", "GPU", "Gpu"}) {
    CallDescriptor c = GoodCall();
    c.platforms = {name};
    absl::StatusOr<ValidatedCall> v = ValidateCall(c);
    ASSERT_TRUE(v.ok()) << name << ": " << v.status();
    EXPECT_TRUE(v->any_gpu);
  }
  CallDescriptor c = GoodCall();
  c.platforms = {"cuda"};
  EXPECT_FALSE(ValidateCall(c)->any_gpu);
}

TEST(ValidateCallTest, SupportedPlatformsCaseInsensitive) {
  struct Case {
    const char* name;
    Platform platform;
  };
  for (const Case& k :
       {Case{"cpu", Platform::kCpu}, Case{"CPU", Platform::kCpu}, Case{"cuda", Platform::kCuda},
        Case{"CUDA", Platform::kCuda}, Case{"Cuda", Platform::kCuda}, Case{"rocm", Platform::kRocm},
        Case{"ROCm", Platform::kRocm}, Case{"oneapi", Platform::kOneApi},
        Case{"OneAPI", Platform::kOneApi}}) {
    CallDescriptor c = GoodCall();
    c.platforms = {k.name};
    absl::StatusOr<ValidatedCall> v = ValidateCall(c);
    ASSERT_TRUE(v.ok()) << k.name << ": " << v.status();
    EXPECT_EQ(v->platform, k.platform) << k.name;
  }
}

TEST(ValidateCallTest, NoHandler) {
  CallDescriptor c = GoodCall();
  c.handler = "";
  ExpectError(ValidateCall(c), absl::StatusCode::kInvalidArgument, "the call names no handler.");
}

// ---- Aliases: JAX's messages, word for word ----

TEST(ValidateCallTest, AliasInputIndexOutOfRange) {
  CallDescriptor c = GoodCall();
  c.aliases = {{2, 0}};
  ExpectError(ValidateCall(c), absl::StatusCode::kInvalidArgument,
              "input_output_aliases contains the mapping '2:0' with input "
              "index 2 outside the range [0, 2).");
}

TEST(ValidateCallTest, AliasInputIndexOutOfRangeWithNoArgs) {
  CallDescriptor c = GoodCall();
  c.args.clear();
  c.aliases = {{0, 1}};
  ExpectError(ValidateCall(c), absl::StatusCode::kInvalidArgument,
              "input_output_aliases contains the mapping '0:1' with input "
              "index 0 outside the range [0, 0).");
}

TEST(ValidateCallTest, AliasOutputIndexOutOfRange) {
  CallDescriptor c = GoodCall();
  c.aliases = {{1, 5}};
  ExpectError(ValidateCall(c), absl::StatusCode::kInvalidArgument,
              "input_output_aliases contains the mapping '1:5' with output "
              "index 5 outside the range [0, 2).");
}

TEST(ValidateCallTest, AliasBothIndicesOutOfRangeReportsInputFirst) {
  CallDescriptor c = GoodCall();
  c.aliases = {{3, 4}};
  ExpectError(ValidateCall(c), absl::StatusCode::kInvalidArgument,
              "input_output_aliases contains the mapping '3:4' with input "
              "index 3 outside the range [0, 2).");
}

TEST(ValidateCallTest, AliasSpecsDiffer) {
  CallDescriptor c = GoodCall();
  c.args = {Spec(DType::kF32, {4, 8})};
  c.results = {Spec(DType::kF32, {8, 4})};
  c.aliases = {{0, 0}};
  ExpectError(ValidateCall(c), absl::StatusCode::kInvalidArgument,
              "input_output_aliases contains the mapping '0:0' referring to "
              "an input with abstract value float32[4,8] and an "
              "output with a different abstract value "
              "float32[8,4].");
}

TEST(ValidateCallTest, AliasDTypesDiffer) {
  CallDescriptor c = GoodCall();
  c.args = {Spec(DType::kS32, {}), Spec(DType::kF32, {3})};
  c.results = {Spec(DType::kS32, {}), Spec(DType::kBF16, {3})};
  c.aliases = {{0, 0}, {1, 1}};
  ExpectError(ValidateCall(c), absl::StatusCode::kInvalidArgument,
              "input_output_aliases contains the mapping '1:1' referring to "
              "an input with abstract value float32[3] and an "
              "output with a different abstract value "
              "bfloat16[3].");
}

TEST(ValidateCallTest, TwoInputsAliasedToOneOutput) {
  CallDescriptor c = GoodCall();
  c.aliases = {{0, 1}, {1, 1}};
  absl::StatusOr<ValidatedCall> v = ValidateCall(c);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(v.status().message(), "input_output_aliases maps inputs 0 and 1 to the same output 1.");
}

TEST(ValidateCallTest, ValidAliases) {
  CallDescriptor c;
  c.handler = "axpy";
  c.platforms = {"cpu"};
  c.args = {Spec(DType::kF64, {10}), Spec(DType::kF64, {10})};
  c.results = {Spec(DType::kF64, {10})};
  c.aliases = {{1, 0}};
  absl::StatusOr<ValidatedCall> v = ValidateCall(c);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_THAT(v->result_alias, ElementsAre(1));
  EXPECT_THAT(v->arg_bytes, ElementsAre(80, 80));
  EXPECT_THAT(v->result_bytes, ElementsAre(80));
  // Args only: the aliased result takes no memory of its own.
  EXPECT_EQ(v->footprint_bytes, 160);
}

TEST(ValidateCallTest, ResultAliasVector) {
  CallDescriptor c;
  c.handler = "h";
  c.platforms = {"cuda"};
  c.args = {Spec(DType::kS8, {1}), Spec(DType::kS16, {2}), Spec(DType::kS32, {3})};
  c.results = {Spec(DType::kS32, {3}), Spec(DType::kU8, {100}), Spec(DType::kS8, {1}),
               Spec(DType::kU8, {7})};
  c.aliases = {{2, 0}, {0, 2}};
  absl::StatusOr<ValidatedCall> v = ValidateCall(c);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->platform, Platform::kCuda);
  EXPECT_THAT(v->result_alias, ElementsAre(2, -1, 0, -1));
  EXPECT_THAT(v->arg_bytes, ElementsAre(1, 4, 12));
  EXPECT_THAT(v->result_bytes, ElementsAre(12, 100, 1, 7));
  // args (1 + 4 + 12) + non-aliased results (100 + 7).
  EXPECT_EQ(v->footprint_bytes, 17 + 107);
}

TEST(ValidateCallTest, NoArgsNoResults) {
  CallDescriptor c;
  c.handler = "sleep";
  c.platforms = {"rocm"};
  absl::StatusOr<ValidatedCall> v = ValidateCall(c, /*max_call_bytes=*/1);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->platform, Platform::kRocm);
  EXPECT_TRUE(v->arg_bytes.empty());
  EXPECT_TRUE(v->result_bytes.empty());
  EXPECT_TRUE(v->result_alias.empty());
  EXPECT_EQ(v->footprint_bytes, 0);
}

// ---- Specs ----

TEST(ValidateCallTest, NegativeDim) {
  CallDescriptor c = GoodCall();
  c.args[1] = Spec(DType::kF32, {4, -8});
  ExpectError(ValidateCall(c), absl::StatusCode::kInvalidArgument,
              "args[1] has negative dim -8 at index 1.");
  c = GoodCall();
  c.results[0] = Spec(DType::kF32, {-2});
  ExpectError(ValidateCall(c), absl::StatusCode::kInvalidArgument,
              "results[0] has negative dim -2 at index 0.");
}

TEST(ValidateCallTest, UnknownDType) {
  CallDescriptor c = GoodCall();
  c.args[0] = Spec(static_cast<DType>(14), {4, 8});
  ExpectError(ValidateCall(c), absl::StatusCode::kInvalidArgument, "args[0] has unknown dtype 14.");
  c = GoodCall();
  c.results[1] = Spec(DType::kInvalid, {});
  ExpectError(ValidateCall(c), absl::StatusCode::kInvalidArgument,
              "results[1] has unknown dtype 0.");
}

TEST(ValidateCallTest, ByteSizeOverflow) {
  CallDescriptor c = GoodCall();
  c.results[1] = Spec(DType::kF64, {int64_t{1} << 31, int64_t{1} << 31});
  ExpectError(ValidateCall(c), absl::StatusCode::kInvalidArgument,
              "results[1] float64[2147483648,2147483648] has a byte size that "
              "overflows int64 at dim 1 (2147483648).");
}

TEST(ValidateCallTest, SpecsCheckedBeforeAliases) {
  CallDescriptor c = GoodCall();
  c.args[0] = Spec(DType::kF32, {-1});
  c.aliases = {{9, 0}};
  ExpectError(ValidateCall(c), absl::StatusCode::kInvalidArgument,
              "args[0] has negative dim -1 at index 0.");
}

// ---- Byte limit ----

TEST(ValidateCallTest, OverMaxCallBytes) {
  CallDescriptor c = GoodCall();  // footprint 512
  absl::StatusOr<ValidatedCall> v = ValidateCall(c, 511);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(v.status().message(), HasSubstr("511"));
  EXPECT_THAT(v.status().message(), HasSubstr("agent"));
  EXPECT_EQ(v.status().message(),
            "the call needs 512 bytes for its tensors, over the agent's limit "
            "of 511 bytes per call.");

  v = ValidateCall(c, 100, "router");
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(v.status().message(),
            "the call needs 512 bytes for its tensors, over the router's "
            "limit of 100 bytes per call.");
}

TEST(ValidateCallTest, AtMaxCallBytesOrNoLimit) {
  CallDescriptor c = GoodCall();
  absl::StatusOr<ValidatedCall> v = ValidateCall(c, 512);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->footprint_bytes, 512);
  v = ValidateCall(c, 0);
  ASSERT_TRUE(v.ok()) << v.status();
  v = ValidateCall(c, -1);
  ASSERT_TRUE(v.ok()) << v.status();
}

TEST(ValidateCallTest, FootprintCountsArgsAndNonAliasedResultsOnly) {
  CallDescriptor c = GoodCall();  // 2 args + 2 results of 128 bytes
  c.aliases = {{0, 0}};
  absl::StatusOr<ValidatedCall> v = ValidateCall(c);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->footprint_bytes, 128 * 3);
  // 384 fits a 384-byte limit only because the aliased result is not counted.
  EXPECT_TRUE(ValidateCall(c, 384).ok());
  c.aliases = {{0, 0}, {1, 1}};
  v = ValidateCall(c, 256);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->footprint_bytes, 256);
  EXPECT_THAT(v->result_alias, ElementsAre(0, 1));
  v = ValidateCall(c, 255);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(v.status().message(), HasSubstr("needs 256 bytes"));
}

TEST(ValidateCallTest, FootprintSaturatesInsteadOfOverflowing) {
  CallDescriptor c;
  c.handler = "copy";
  c.platforms = {"cpu"};
  // Each fits int64; the sum does not.
  c.args = {Spec(DType::kS8, {kMax}), Spec(DType::kS8, {kMax})};
  c.results = {Spec(DType::kS8, {kMax})};
  absl::StatusOr<ValidatedCall> v = ValidateCall(c);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->footprint_bytes, kMax);
  v = ValidateCall(c, int64_t{1} << 40);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(v.status().message(), HasSubstr("1099511627776"));
}

// ---- Errors found outside ValidateCall ----

TEST(ContractErrorsTest, HandlerNotFound) {
  absl::Status s = HandlerNotFoundError("my_handler", "cuda");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("my_handler"));
  EXPECT_THAT(s.message(), HasSubstr("cuda"));
  EXPECT_EQ(s.message(), "handler 'my_handler' is not registered for platform 'cuda'.");
  // With what is registered: sorted, once each, the first 24 named.
  EXPECT_EQ(HandlerNotFoundError("x", "cpu", {"sum", "copy", "sum"}).message(),
            "handler 'x' is not registered for platform 'cpu'. Registered there: copy, sum.");
  std::vector<std::string> many;
  for (int i = 10; i < 40; ++i) many.push_back(absl::StrCat("h", i));
  EXPECT_THAT(std::string(HandlerNotFoundError("x", "cpu", many).message()),
              ::testing::EndsWith("h32, h33 and 6 more."));
}

TEST(ContractErrorsTest, NoLiveAgent) {
  absl::Status s = NoLiveAgentError("rocm");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr("rocm"));
  EXPECT_EQ(s.message(), "no live agent serves platform 'rocm'.");
}

TEST(ContractErrorsTest, PlatformNotServed) {
  absl::Status s = PlatformNotServedError("cpu", "CUDA");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("'cpu'"));
  EXPECT_THAT(s.message(), HasSubstr("'CUDA'"));
  EXPECT_EQ(s.message(),
            "this agent serves platform 'cpu', but the call asks for platform "
            "'CUDA'.");
}

}  // namespace
}  // namespace farcall
