#include "core/wire/header_limits.h"

#include <string>

#include "farcall/v1/farcall.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace farcall {
namespace {

using ::testing::HasSubstr;

v1::CallHeader Header(int args, int results, int rank) {
  v1::CallHeader h;
  h.set_handler("copy");
  h.add_platforms("cpu");
  for (int i = 0; i < args + results; ++i) {
    v1::TensorSpec* t = i < args ? h.add_args() : h.add_results();
    t->set_dtype(v1::F32);
    for (int d = 0; d < rank; ++d) t->add_dims(2);
  }
  return h;
}

void ExpectOver(const v1::CallHeader& h, const HeaderLimits& l, const std::string& part) {
  absl::Status s = CheckHeaderLimits(h.SerializeAsString(), l);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_THAT(s.message(), HasSubstr(part));
}

TEST(HeaderLimitsTest, HeadersWithinTheLimitsPass) {
  HeaderLimits l;
  v1::CallHeader h = Header(512, 512, 64);
  (*h.mutable_attributes())["alpha"].set_f64(2);
  (*h.mutable_attributes())["message"].set_str(std::string(1000, 'x'));
  EXPECT_TRUE(CheckHeaderLimits(h.SerializeAsString(), l).ok());
}

TEST(HeaderLimitsTest, CountsArgsAndResultsTogether) {
  HeaderLimits l;
  l.max_tensors = 10;
  EXPECT_TRUE(CheckHeaderLimits(Header(5, 5, 1).SerializeAsString(), l).ok());
  ExpectOver(Header(6, 5, 1), l,
             "the call header declares more tensors (args plus results), over the limit "
             "of 10 (--max_tensors).");
}

TEST(HeaderLimitsTest, AMillionZeroSizeTensorsAreRefused) {
  v1::CallHeader h;
  h.set_handler("copy");
  h.add_platforms("cpu");
  std::string bytes = h.SerializeAsString();
  // A zero-size TensorSpec is two bytes: the tag of args and length 0.
  for (int i = 0; i < 1000000; ++i) bytes += std::string("\x1a\x00", 2);
  HeaderLimits l;
  l.max_header_bytes = 64 << 20;
  absl::Status s = CheckHeaderLimits(bytes, l);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("--max_tensors"));
  EXPECT_THAT(CheckHeaderLimits(bytes, HeaderLimits()).message(),
              HasSubstr("the call header is 2000011 bytes, over the limit of 1048576 "
                        "(--max_header_bytes)."));
}

TEST(HeaderLimitsTest, RankPackedOrNot) {
  HeaderLimits l;
  l.max_rank = 3;
  EXPECT_TRUE(CheckHeaderLimits(Header(1, 1, 3).SerializeAsString(), l).ok());
  ExpectOver(Header(1, 1, 4), l, "args[0] has rank 4, over the limit of 3 (--max_rank).");
  ExpectOver(Header(0, 2, 4), l, "results[0] has rank 4");
  // Unpacked dims (another encoder's choice) count the same.
  v1::CallHeader h;
  std::string bytes =
      h.SerializeAsString() + std::string("\x22\x08\x10\x02\x10\x02\x10\x02\x10\x02", 10);
  EXPECT_THAT(CheckHeaderLimits(bytes, l).message(), HasSubstr("results[0] has rank 4"));
}

TEST(HeaderLimitsTest, AttributesNamesAndStrings) {
  HeaderLimits l;
  l.max_attributes = 2;
  l.max_name_bytes = 8;
  l.max_string_bytes = 16;
  v1::CallHeader h = Header(1, 1, 1);
  (*h.mutable_attributes())["a"].set_i64(1);
  (*h.mutable_attributes())["b"].set_str(std::string(16, 's'));
  EXPECT_TRUE(CheckHeaderLimits(h.SerializeAsString(), l).ok());
  v1::CallHeader more = h;
  (*more.mutable_attributes())["c"].set_b(true);
  ExpectOver(more, l,
             "the call header has more attributes, over the limit of 2 (--max_attributes).");
  v1::CallHeader long_string = h;
  (*long_string.mutable_attributes())["b"].set_str(std::string(17, 's'));
  ExpectOver(long_string, l,
             "a string attribute is 17 bytes, over the limit of 16 (--max_string_bytes).");
  v1::CallHeader long_name = Header(1, 1, 1);
  (*long_name.mutable_attributes())["nine_char"].set_i64(1);
  ExpectOver(long_name, l, "an attribute name is 9 bytes");
  v1::CallHeader long_handler = Header(1, 1, 1);
  long_handler.set_handler("a_long_handler_name");
  ExpectOver(long_handler, l,
             "the handler name is 19 bytes, over the limit of 8 (--max_name_bytes).");
}

TEST(HeaderLimitsTest, FieldsOfAnotherWireTypeAreSkippedNotTrusted) {
  // A handler field sent as a varint is an unknown field to the parser,
  // which goes on to parse what follows; so does the check (the fuzzer's
  // find).
  HeaderLimits l;
  l.max_tensors = 1;
  v1::CallHeader h = Header(2, 0, 1);
  std::string bytes = std::string("\x08\x10", 2) + h.SerializeAsString();
  v1::CallHeader parsed;
  ASSERT_TRUE(parsed.ParseFromString(bytes));
  EXPECT_EQ(CheckHeaderLimits(bytes, l).code(), absl::StatusCode::kResourceExhausted);
  // Dims as fixed64 are skipped by the parser too.
  l.max_tensors = 8;
  l.max_rank = 1;
  std::string spec = std::string("\x11", 1) + std::string(8, '\0') + "\x10\x02\x10\x02";
  std::string with_odd_dims = std::string("\x1a", 1) + static_cast<char>(spec.size()) + spec;
  ASSERT_TRUE(parsed.ParseFromString(with_odd_dims));
  EXPECT_EQ(parsed.args(0).dims_size(), 2);
  EXPECT_EQ(CheckHeaderLimits(with_odd_dims, l).code(), absl::StatusCode::kResourceExhausted);
}

TEST(HeaderLimitsTest, CallIdsAreBounded) {
  HeaderLimits l;
  v1::CallHeader h = Header(1, 1, 1);
  h.set_call_id(std::string(128, 'i'));
  EXPECT_TRUE(CheckHeaderLimits(h.SerializeAsString(), l).ok());
  h.set_call_id(std::string(129, 'i'));
  ExpectOver(h, l, "the call_id is 129 bytes, over the limit of 128 (--max_call_id_bytes).");
}

TEST(HeaderLimitsTest, AliasesAndSharedMemoryListsAreBounded) {
  HeaderLimits l;
  l.max_tensors = 4;
  l.max_name_bytes = 16;
  v1::CallHeader h = Header(1, 1, 1);
  for (uint32_t i = 0; i < 4; ++i) (*h.mutable_input_output_aliases())[i] = 0;
  EXPECT_TRUE(CheckHeaderLimits(h.SerializeAsString(), l).ok());
  (*h.mutable_input_output_aliases())[4] = 0;
  ExpectOver(h, l, "more input_output_aliases entries, over the limit of 4 (--max_tensors)");

  h = Header(1, 1, 1);
  v1::ShmTensors* shm = h.mutable_shm();
  shm->set_region(std::string(16, 'r'));
  for (int i = 0; i < 4; ++i) shm->add_arg_offsets(i);
  EXPECT_TRUE(CheckHeaderLimits(h.SerializeAsString(), l).ok());
  shm->add_arg_offsets(9);
  ExpectOver(h, l, "the call's shm lists more offsets or regions");
  shm->clear_arg_offsets();
  for (int i = 0; i < 5; ++i) shm->add_result_regions("r");
  ExpectOver(h, l, "the call's shm lists more offsets or regions");
  shm->clear_result_regions();
  shm->add_arg_regions(std::string(17, 'r'));
  ExpectOver(h, l, "a shared-memory region name is 17 bytes, over the limit of 16");
  // Two shm fields merge: their lists count together.
  v1::CallHeader half = Header(1, 1, 1);
  for (int i = 0; i < 3; ++i) half.mutable_shm()->add_arg_offsets(i);
  const std::string twice = half.SerializeAsString() + half.SerializeAsString();
  EXPECT_EQ(CheckHeaderLimits(twice, l).code(), absl::StatusCode::kResourceExhausted);
}

TEST(HeaderLimitsTest, MalformedBytesAreLeftToTheParser) {
  EXPECT_TRUE(CheckHeaderLimits(std::string("\x1a\x7f\x01", 3), HeaderLimits()).ok());
}

TEST(HeaderLimitsTest, LimitsMustBePositive) {
  HeaderLimits l;
  l.max_rank = 0;
  absl::Status s = ValidateHeaderLimits(l);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "--max_rank must be positive; got 0.");
}

}  // namespace
}  // namespace farcall
