#include "device_agents/call_ledger.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace farcall::agent {
namespace {

using ::testing::HasSubstr;

grpc::ByteBuffer Message(const std::string& bytes) {
  grpc::Slice s(bytes);
  return grpc::ByteBuffer(&s, 1);
}

// Caller "" (no tokens) and one header, unless said otherwise.
CallKey K(const std::string& id, const std::string& principal = "",
          const std::string& digest = "d") {
  return {principal, id, digest};
}

std::string Bytes(const grpc::ByteBuffer& b) {
  grpc::Slice s;
  EXPECT_TRUE(b.DumpToSingleSlice(&s).ok());
  return std::string(reinterpret_cast<const char*>(s.begin()), s.size());
}

TEST(CallLedgerTest, ARepeatWhileRunningIsRefusedAndAfterwardsReplayed) {
  CallLedger ledger;
  EXPECT_TRUE(ledger.Begin(K("a")).run);
  CallLedger::Claim running = ledger.Begin(K("a"));
  EXPECT_FALSE(running.run);
  EXPECT_EQ(running.status.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(running.status.message(), HasSubstr("call a is running on this agent"));
  const grpc::ByteBuffer answer = Message("the answer");
  ledger.Ran(K("a"), absl::OkStatus(), &answer);
  CallLedger::Claim again = ledger.Begin(K("a"));
  EXPECT_FALSE(again.run);
  EXPECT_TRUE(again.status.ok());
  ASSERT_TRUE(again.answer.has_value());
  EXPECT_EQ(Bytes(*again.answer), "the answer");
  EXPECT_TRUE(ledger.Begin(K("b")).run);  // another id is another call
}

TEST(CallLedgerTest, ErrorsAreReplayedTooAndUnkeptAnswersAreAlreadyExists) {
  CallLedger ledger;
  ASSERT_TRUE(ledger.Begin(K("e")).run);
  const grpc::ByteBuffer empty;
  ledger.Ran(K("e"), absl::InternalError("boom"), &empty);
  EXPECT_EQ(ledger.Begin(K("e")).status, absl::InternalError("boom"));
  ASSERT_TRUE(ledger.Begin(K("s")).run);
  ledger.Ran(K("s"), absl::OkStatus(), nullptr);  // a streamed answer
  CallLedger::Claim c = ledger.Begin(K("s"));
  EXPECT_FALSE(c.run);
  EXPECT_EQ(c.status.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(c.status.message(), HasSubstr("already ran on this agent (OK); its answer was "
                                            "not kept"));
}

TEST(CallLedgerTest, ACallThatNeverRanIsForgotten) {
  CallLedger ledger;
  ASSERT_TRUE(ledger.Begin(K("x")).run);
  ledger.Forget(K("x"));
  EXPECT_TRUE(ledger.Begin(K("x")).run);
}

TEST(CallLedgerTest, IdsExpireAndAnswersStayWithinTheirBytes) {
  CallLedger::Options o;
  o.ttl = absl::Minutes(1);
  // Room for the two ids and one answer.
  o.max_bytes = 2 * (CallLedger::kEntryOverheadBytes + 2 + 1) + 10;
  CallLedger ledger(o);
  const absl::Time t0 = absl::Now();
  const grpc::ByteBuffer six = Message("123456");
  ASSERT_TRUE(ledger.Begin(K("1"), t0).run);
  ledger.Ran(K("1"), absl::OkStatus(), &six, t0);
  ASSERT_TRUE(ledger.Begin(K("2"), t0).run);
  ledger.Ran(K("2"), absl::OkStatus(), &six, t0 + absl::Seconds(1));
  EXPECT_LE(ledger.kept_bytes() + ledger.id_bytes(), o.max_bytes);
  EXPECT_EQ(ledger.kept_bytes(), 6);
  // The older answer went; its id stays, so it is still never run twice.
  CallLedger::Claim first = ledger.Begin(K("1"), t0 + absl::Seconds(2));
  EXPECT_FALSE(first.run);
  EXPECT_FALSE(first.answer.has_value());
  EXPECT_TRUE(ledger.Begin(K("2"), t0 + absl::Seconds(2)).answer.has_value());
  // Past the TTL both ids are forgotten.
  EXPECT_TRUE(ledger.Begin(K("1"), t0 + absl::Minutes(2)).run);
  EXPECT_EQ(ledger.size(), 1u);
}

// One caller's call_id is not another's: the same id from another
// principal runs afresh, and never sees the first caller's answer.
TEST(CallLedgerTest, IdsArePerCaller) {
  CallLedger ledger;
  ASSERT_TRUE(ledger.Begin(K("x", "token:b")).run);
  const grpc::ByteBuffer answer = Message("b's scaled tensor");
  ledger.Ran(K("x", "token:b"), absl::OkStatus(), &answer);
  CallLedger::Claim a = ledger.Begin(K("x", "token:a"));
  EXPECT_TRUE(a.run);
  EXPECT_FALSE(a.answer.has_value());
  EXPECT_TRUE(ledger.Begin(K("x", "token:b")).answer.has_value());
  EXPECT_EQ(ledger.size(), 2u);
}

TEST(CallLedgerTest, AnIdReusedForAnotherCallIsInvalid) {
  CallLedger ledger;
  ASSERT_TRUE(ledger.Begin(K("x", "", "scale 2.0")).run);
  CallLedger::Claim other = ledger.Begin(K("x", "", "scale 3.0"));
  EXPECT_FALSE(other.run);
  EXPECT_EQ(other.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(other.status.message(),
            "call_id x was already used for another call (another handler, specs or "
            "attributes); a call_id names one call.");
  const grpc::ByteBuffer answer = Message("done");
  ledger.Ran(K("x", "", "scale 2.0"), absl::OkStatus(), &answer);
  EXPECT_EQ(ledger.Begin(K("x", "", "scale 3.0")).status.code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(ledger.Begin(K("x", "", "scale 2.0")).answer.has_value());
}

// Ids count in the ledger's bytes, and a full ledger refuses: a call with
// side effects never runs unrecorded.
TEST(CallLedgerTest, AFullLedgerRefusesInsteadOfRunningUnrecorded) {
  CallLedger::Options o;
  o.max_bytes = 3 * (CallLedger::kEntryOverheadBytes + 2 * 8 + 1);
  CallLedger ledger(o);
  const absl::Time t0 = absl::Now();
  for (const char* id : {"id-00001", "id-00002", "id-00003"}) {
    ASSERT_TRUE(ledger.Begin(K(id), t0).run) << id;
  }
  EXPECT_EQ(ledger.id_bytes(), o.max_bytes);
  CallLedger::Claim c = ledger.Begin(K("id-00004"), t0);
  EXPECT_FALSE(c.run);
  EXPECT_EQ(c.status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(c.status.message(), HasSubstr("exactly-once ledger is full"));
  EXPECT_THAT(c.status.message(), HasSubstr("--call_id_cache_bytes"));
  // Once an id expires there is room again.
  ledger.Ran(K("id-00001"), absl::OkStatus(), nullptr, t0);
  EXPECT_TRUE(ledger.Begin(K("id-00004"), t0 + o.ttl + absl::Seconds(1)).run);
  // And by count.
  o.max_bytes = int64_t{1} << 20;
  o.max_ids = 2;
  CallLedger few(o);
  EXPECT_TRUE(few.Begin(K("a")).run);
  EXPECT_TRUE(few.Begin(K("b")).run);
  EXPECT_EQ(few.Begin(K("c")).status.code(), absl::StatusCode::kResourceExhausted);
}

// One caller cannot fill the ledger: past its share its own new calls are
// refused (and its answers no longer kept), while another caller's calls
// with side effects still run and keep their answers.
TEST(CallLedgerTest, OneCallerFillingItsShareLeavesTheOthersRoom) {
  CallLedger::Options o;
  const int64_t id_cost =
      CallLedger::kEntryOverheadBytes + 2 * (7 + 8) + 1;  // "token:a", 8-byte ids
  o.max_bytes = 100 * id_cost;
  o.max_bytes_per_caller = 10 * id_cost;
  CallLedger ledger(o);
  const absl::Time t0 = absl::Now();
  int ran = 0;
  CallLedger::Claim refused;
  for (int i = 0; i < 1000; ++i) {
    const std::string id = absl::StrCat("a-", absl::Dec(i, absl::kZeroPad6));
    CallLedger::Claim c = ledger.Begin(K(id, "token:a"), t0);
    if (!c.run) {
      refused = c;
      break;
    }
    ++ran;
  }
  EXPECT_EQ(ran, 10);
  EXPECT_EQ(refused.status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(
      refused.status.message(),
      absl::StrCat(
          "this caller's share of the agent's exactly-once ledger is full (", 10 * id_cost,
          " bytes of call_ids and kept answers, --call_id_cache_bytes_per_tenant=", 10 * id_cost,
          "); a call with side effects is never run unrecorded: retry once "
          "earlier ids expire (--call_id_ttl)."));
  EXPECT_EQ(ledger.caller_bytes("token:a"), 10 * id_cost);
  // The other caller runs, and its answer is kept and replayed.
  const grpc::ByteBuffer answer = Message("b's answer");
  ASSERT_TRUE(ledger.Begin(K("b-000001", "token:b"), t0).run);
  ledger.Ran(K("b-000001", "token:b"), absl::OkStatus(), &answer, t0);
  CallLedger::Claim again = ledger.Begin(K("b-000001", "token:b"), t0);
  ASSERT_TRUE(again.answer.has_value());
  EXPECT_EQ(Bytes(*again.answer), "b's answer");
  // A's ids expire, and its share is free again.
  for (int i = 0; i < 10; ++i) {
    ledger.Ran(K(absl::StrCat("a-", absl::Dec(i, absl::kZeroPad6)), "token:a"), absl::OkStatus(),
               nullptr, t0);
  }
  EXPECT_TRUE(ledger.Begin(K("a-999999", "token:a"), t0 + o.ttl + absl::Seconds(1)).run);
  EXPECT_EQ(ledger.caller_bytes("token:a"), id_cost);
  // A caller at its share keeps its ids but not its answers.
  CallLedger::Options tight = o;
  tight.max_bytes_per_caller = id_cost + 4;
  CallLedger small(tight);
  ASSERT_TRUE(small.Begin(K("c-000001", "token:c"), t0).run);
  small.Ran(K("c-000001", "token:c"), absl::OkStatus(), &answer, t0);
  CallLedger::Claim c = small.Begin(K("c-000001", "token:c"), t0);
  EXPECT_FALSE(c.run);
  EXPECT_FALSE(c.answer.has_value());
  EXPECT_EQ(c.status.code(), absl::StatusCode::kAlreadyExists);
  // Without a principal (no tokens), the whole ledger is the caller's.
  CallLedger open(o);
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(open.Begin(K(absl::StrCat("n-", absl::Dec(i, absl::kZeroPad6))), t0).run) << i;
  }
}

// A tenant's tokens-file line may give it a share of its own
// (`ledger_bytes=`), larger or smaller than the flag's; the refusal names it.
TEST(CallLedgerTest, ATenantsOwnShareReplacesTheFlags) {
  CallLedger::Options o;
  const int64_t id_cost = CallLedger::kEntryOverheadBytes + 2 * (13 + 8) + 1;  // "tenant:team-a"
  o.max_bytes = 100 * id_cost;
  o.max_bytes_per_caller = 2 * id_cost;
  CallLedger ledger(o);
  const absl::Time t0 = absl::Now();
  int ran = 0;
  CallLedger::Claim refused;
  for (int i = 0; i < 100 && refused.run; ++i) {
    CallKey k = K(absl::StrCat("a-", absl::Dec(i, absl::kZeroPad6)), "tenant:team-a");
    k.share_bytes = 5 * id_cost;
    refused = ledger.Begin(k, t0);
    if (refused.run) ++ran;
  }
  EXPECT_EQ(ran, 5);
  EXPECT_EQ(refused.status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(refused.status.message()),
              ::testing::HasSubstr(absl::StrCat("bytes of call_ids and kept answers, ledger_bytes=",
                                                5 * id_cost, " on its tokens-file line)")));
}

}  // namespace
}  // namespace farcall::agent
