#include "device_agents/call_ledger.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace farcall::agent {
namespace {

using ::testing::HasSubstr;

grpc::ByteBuffer Message(const std::string& bytes) {
  grpc::Slice s(bytes);
  return grpc::ByteBuffer(&s, 1);
}

std::string Bytes(const grpc::ByteBuffer& b) {
  grpc::Slice s;
  EXPECT_TRUE(b.DumpToSingleSlice(&s).ok());
  return std::string(reinterpret_cast<const char*>(s.begin()), s.size());
}

TEST(CallLedgerTest, ARepeatWhileRunningIsRefusedAndAfterwardsReplayed) {
  CallLedger ledger;
  EXPECT_TRUE(ledger.Begin("a").run);
  CallLedger::Claim running = ledger.Begin("a");
  EXPECT_FALSE(running.run);
  EXPECT_EQ(running.status.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(running.status.message(), HasSubstr("call a is running on this agent"));
  const grpc::ByteBuffer answer = Message("the answer");
  ledger.Ran("a", absl::OkStatus(), &answer);
  CallLedger::Claim again = ledger.Begin("a");
  EXPECT_FALSE(again.run);
  EXPECT_TRUE(again.status.ok());
  ASSERT_TRUE(again.answer.has_value());
  EXPECT_EQ(Bytes(*again.answer), "the answer");
  EXPECT_TRUE(ledger.Begin("b").run);  // another id is another call
}

TEST(CallLedgerTest, ErrorsAreReplayedTooAndUnkeptAnswersAreAlreadyExists) {
  CallLedger ledger;
  ASSERT_TRUE(ledger.Begin("e").run);
  const grpc::ByteBuffer empty;
  ledger.Ran("e", absl::InternalError("boom"), &empty);
  EXPECT_EQ(ledger.Begin("e").status, absl::InternalError("boom"));
  ASSERT_TRUE(ledger.Begin("s").run);
  ledger.Ran("s", absl::OkStatus(), nullptr);  // a streamed answer
  CallLedger::Claim c = ledger.Begin("s");
  EXPECT_FALSE(c.run);
  EXPECT_EQ(c.status.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(c.status.message(), HasSubstr("already ran on this agent (OK); its answer was "
                                            "not kept"));
}

TEST(CallLedgerTest, ACallThatNeverRanIsForgotten) {
  CallLedger ledger;
  ASSERT_TRUE(ledger.Begin("x").run);
  ledger.Forget("x");
  EXPECT_TRUE(ledger.Begin("x").run);
}

TEST(CallLedgerTest, IdsExpireAndAnswersStayWithinTheirBytes) {
  CallLedger::Options o;
  o.ttl = absl::Minutes(1);
  o.max_bytes = 10;
  CallLedger ledger(o);
  const absl::Time t0 = absl::Now();
  const grpc::ByteBuffer six = Message("123456");
  ASSERT_TRUE(ledger.Begin("1", t0).run);
  ledger.Ran("1", absl::OkStatus(), &six, t0);
  ASSERT_TRUE(ledger.Begin("2", t0).run);
  ledger.Ran("2", absl::OkStatus(), &six, t0 + absl::Seconds(1));
  EXPECT_LE(ledger.kept_bytes(), 10);
  // The older answer went; its id stays, so it is still never run twice.
  CallLedger::Claim first = ledger.Begin("1", t0 + absl::Seconds(2));
  EXPECT_FALSE(first.run);
  EXPECT_FALSE(first.answer.has_value());
  EXPECT_TRUE(ledger.Begin("2", t0 + absl::Seconds(2)).answer.has_value());
  // Past the TTL both ids are forgotten.
  EXPECT_TRUE(ledger.Begin("1", t0 + absl::Minutes(2)).run);
  EXPECT_EQ(ledger.size(), 1u);
}

}  // namespace
}  // namespace farcall::agent
