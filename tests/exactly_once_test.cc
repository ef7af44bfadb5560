// Calls with side effects run at most once per call_id, direct and through
// the router: a repeat gets the first answer (unary), or ALREADY_EXISTS
// while the first runs or when its answer was not kept (streamed). The side
// effect is a counter in the agent (tests/plugins/side_effect_plugin.cc).
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "farcall/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/process_harness.h"

namespace farcall {
namespace {

using ::farcall::testing::ChildProcess;
using ::testing::HasSubstr;

// test.count: bumps the agent's counter and answers its new value.
absl::StatusOr<int64_t> Count(Client& client, const std::string& call_id,
                              bool side_effect = true, Transport t = Transport::kUnary) {
  CallRequest req;
  req.handler = "test.count";
  req.results = {TensorSpec{DType::kS64, {1}}};
  req.has_side_effect = side_effect;
  CallOptions o;
  o.call_id = call_id;
  o.transport = t;
  o.timeout = absl::Seconds(20);
  absl::StatusOr<CallResult> r = client.Call(req, o);
  if (!r.ok()) return r.status();
  return r->results[0].as<int64_t>()[0];
}

class ExactlyOnceTest : public ::testing::TestWithParam<bool> {  // through the router?
 protected:
  void SetUp() override {
    auto agent = ChildProcess::Start(
        FARCALL_AGENT_BIN,
        {"--listen=127.0.0.1:0", absl::StrCat("--plugins=", FARCALL_SIDE_EFFECT_PLUGIN)});
    ASSERT_TRUE(agent.ok()) << agent.status();
    agent_ = *std::move(agent);
    std::string target = agent_->address();
    if (GetParam()) {
      auto router = ChildProcess::Start(FARCALL_ROUTER_BIN,
                                        {"--listen=127.0.0.1:0", "--agents=" + target});
      ASSERT_TRUE(router.ok()) << router.status();
      router_ = *std::move(router);
      target = router_->address();
    }
    auto client = Client::Connect(target);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
  }

  std::unique_ptr<ChildProcess> agent_, router_;
  std::unique_ptr<Client> client_;
};

TEST_P(ExactlyOnceTest, ARepeatedCallIdGetsTheFirstAnswerAndRunsNothing) {
  EXPECT_EQ(Count(*client_, "first").value_or(-1), 1);
  EXPECT_EQ(Count(*client_, "first").value_or(-1), 1);  // replayed
  EXPECT_EQ(Count(*client_, "first").value_or(-1), 1);
  EXPECT_EQ(Count(*client_, "second").value_or(-1), 2);  // a new call runs
  EXPECT_EQ(Count(*client_, "").value_or(-1), 3);        // a fresh id per call
  EXPECT_EQ(Count(*client_, "").value_or(-1), 4);
}

TEST_P(ExactlyOnceTest, CallsWithoutSideEffectsRunEveryTime) {
  EXPECT_EQ(Count(*client_, "same", false).value_or(-1), 1);
  EXPECT_EQ(Count(*client_, "same", false).value_or(-1), 2);
}

TEST_P(ExactlyOnceTest, AStreamedAnswerIsNotKeptSoItsRepeatIsAlreadyExists) {
  EXPECT_EQ(Count(*client_, "streamed", true, Transport::kStream).value_or(-1), 1);
  absl::StatusOr<int64_t> again = Count(*client_, "streamed", true, Transport::kStream);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists) << again.status();
  EXPECT_THAT(again.status().message(),
              HasSubstr("call streamed already ran on this agent (OK); its answer was not kept"));
  EXPECT_EQ(Count(*client_, "next").value_or(-1), 2);  // nothing ran in between
}

TEST_P(ExactlyOnceTest, ASharedMemoryAnswerIsNeverReplayedIntoAnotherRegion) {
  // Direct to a local agent, kAuto goes through shared memory, whose answer
  // lies in the first call's region: the repeat must not get it.
  EXPECT_EQ(Count(*client_, "local", true, Transport::kAuto).value_or(-1), 1);
  absl::StatusOr<int64_t> again = Count(*client_, "local", true, Transport::kAuto);
  if (GetParam()) {
    EXPECT_EQ(again.value_or(-1), 1);  // through the router: gRPC, replayed
  } else {
    EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists) << again.status();
  }
}

TEST_P(ExactlyOnceTest, ARepeatWhileTheFirstRunsIsAlreadyExists) {
  CallRequest sleep;
  sleep.handler = "sleep";
  sleep.attributes["ms"] = int64_t{1500};
  sleep.has_side_effect = true;
  CallOptions o;
  o.call_id = "slow";
  o.timeout = absl::Seconds(20);
  // Two at once with one id: one runs, the other is told it is running.
  auto a = client_->CallFuture(sleep, o);
  auto b = client_->CallFuture(sleep, o);
  std::vector<absl::Status> answers = {a.get().status(), b.get().status()};
  const int ok = answers[0].ok() + answers[1].ok();
  EXPECT_EQ(ok, 1) << answers[0] << " / " << answers[1];
  for (const absl::Status& s : answers) {
    if (s.ok()) continue;
    EXPECT_EQ(s.code(), absl::StatusCode::kAlreadyExists) << s;
    EXPECT_THAT(s.message(), HasSubstr("call slow is running on this agent"));
  }
}

INSTANTIATE_TEST_SUITE_P(DirectAndRouted, ExactlyOnceTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Routed" : "Direct"; });

}  // namespace
}  // namespace farcall
