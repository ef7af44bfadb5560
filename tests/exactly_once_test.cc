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
absl::StatusOr<int64_t> CountOn(Client& client, const std::string& call_id, bool side_effect = true,
                                Rpc t = Rpc::kUnary, bool via_router = false) {
  CallRequest req;
  req.handler = "test.count";
  req.results = {TensorSpec{DType::kS64, {1}}};
  req.has_side_effect = side_effect;
  CallOptions o;
  o.call_id = call_id;
  o.rpc = t;
  o.timeout = absl::Seconds(20);
  o.via_router = via_router;
  o.shm_min_bytes = 0;  // kAuto takes shared memory however small the call
  absl::StatusOr<CallResult> r = client.Call(req, o);
  if (!r.ok()) return r.status();
  return r->results[0].as<int64_t>()[0];
}

// How the calls go: to one agent; through a router in front of two; or
// to one of those two, chosen by the router (lookaside). With two agents a
// repeat must reach the agent that ran the first.
enum class Path { kDirect, kRouted, kLookaside };

class ExactlyOnceTest : public ::testing::TestWithParam<Path> {
 protected:
  bool Routed() const { return GetParam() != Path::kDirect; }

  absl::StatusOr<int64_t> Count(const std::string& call_id, bool side_effect = true,
                                Rpc t = Rpc::kUnary) {
    return CountOn(*client_, call_id, side_effect, t, GetParam() == Path::kRouted);
  }

  void SetUp() override {
    std::vector<std::string> addresses;
    for (int i = 0; i < (Routed() ? 2 : 1); ++i) {
      auto agent = ChildProcess::Start(
          FARCALL_AGENT_BIN,
          {"--listen=127.0.0.1:0", absl::StrCat("--plugins=", FARCALL_SIDE_EFFECT_PLUGIN)});
      ASSERT_TRUE(agent.ok()) << agent.status();
      addresses.push_back(agent->get()->address());
      agents_.push_back(*std::move(agent));
    }
    std::string target = addresses[0];
    if (Routed()) {
      auto router = ChildProcess::Start(
          FARCALL_ROUTER_BIN,
          {"--listen=127.0.0.1:0", absl::StrCat("--agents=", addresses[0], ",", addresses[1])});
      ASSERT_TRUE(router.ok()) << router.status();
      router_ = *std::move(router);
      target = router_->address();
    }
    auto client = Client::Connect(target);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
  }

  // How many times test.count ran on all agents (asked of each directly).
  int64_t Runs() {
    int64_t runs = 0;
    for (const auto& a : agents_) {
      auto direct = Client::Connect(a->address());
      EXPECT_TRUE(direct.ok());
      // Without side effects it runs and answers its count, this run included.
      runs += CountOn(**direct, "", /*side_effect=*/false).value_or(1) - 1;
    }
    return runs;
  }

  std::vector<std::unique_ptr<ChildProcess>> agents_;
  std::unique_ptr<ChildProcess> router_;
  std::unique_ptr<Client> client_;
};

TEST_P(ExactlyOnceTest, ARepeatedCallIdGetsTheFirstAnswerAndRunsNothing) {
  for (int i = 0; i < 20; ++i) {
    const std::string id = absl::StrCat("call-", i);
    absl::StatusOr<int64_t> first = Count(id);
    ASSERT_TRUE(first.ok()) << first.status();
    for (int repeat = 0; repeat < 3; ++repeat) {
      EXPECT_EQ(Count(id).value_or(-1), *first) << id;  // replayed
    }
  }
  EXPECT_TRUE(Count("").ok());  // a fresh id per call: runs
  EXPECT_TRUE(Count("").ok());
  EXPECT_EQ(Runs(), 22);
}

TEST_P(ExactlyOnceTest, RepeatsMeetTheFirstAgentWhicheverWayTheyGo) {
  if (GetParam() != Path::kLookaside) GTEST_SKIP() << "needs a router in front of two agents";
  // The client picks the agent a router would (the same rendezvous hash in
  // both processes): a call sent directly, then repeated through the router,
  // or the other way round, reaches one agent, which replays it.
  for (int i = 0; i < 10; ++i) {
    const std::string id = absl::StrCat("mixed-", i);
    const bool direct_first = i % 2 == 0;
    absl::StatusOr<int64_t> first =
        CountOn(*client_, id, true, Rpc::kUnary, /*via_router=*/!direct_first);
    ASSERT_TRUE(first.ok()) << first.status();
    EXPECT_EQ(CountOn(*client_, id, true, Rpc::kUnary, /*via_router=*/direct_first).value_or(-1),
              *first)
        << id;
  }
  EXPECT_EQ(Runs(), 10);
}

// A handler's own PERMISSION_DENIED or UNAUTHENTICATED is its answer, not
// an agent's refusal of the caller's token: a call with side effects that
// fails so runs once, whichever way it goes (the lookaside used to take it
// for an auth refusal and run it again through the router, under a fresh
// call_id).
TEST_P(ExactlyOnceTest, AHandlersOwnAuthErrorsAreNeverRetried) {
  for (int64_t code : {int64_t{7}, int64_t{16}, int64_t{14}}) {
    CallRequest req;
    req.handler = "test.count_then_fail";
    req.has_side_effect = true;
    req.attributes["code"] = code;
    CallOptions o;
    o.timeout = absl::Seconds(20);
    o.via_router = GetParam() == Path::kRouted;
    absl::Status s = client_->Call(req, o).status();
    EXPECT_EQ(static_cast<int64_t>(s.code()), code) << s;
    EXPECT_EQ(s.message(), "test.count_then_fail: the handler failed");
  }
  EXPECT_EQ(Runs(), 3);
}

TEST_P(ExactlyOnceTest, CallsWithoutSideEffectsRunEveryTime) {
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(Count("same", false).ok());
  EXPECT_EQ(Runs(), 4);
}

TEST_P(ExactlyOnceTest, AStreamedAnswerIsNotKeptSoItsRepeatIsAlreadyExists) {
  EXPECT_TRUE(Count("streamed", true, Rpc::kStream).ok());
  absl::StatusOr<int64_t> again = Count("streamed", true, Rpc::kStream);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists) << again.status();
  EXPECT_THAT(again.status().message(),
              HasSubstr("call streamed already ran on this agent (OK); its answer was not kept"));
  EXPECT_EQ(Runs(), 1);
}

TEST_P(ExactlyOnceTest, ASharedMemoryAnswerIsNeverReplayedIntoAnotherRegion) {
  // Direct to a local agent (the router's choice or not), kAuto goes through
  // shared memory, whose answer lies in the first call's region: the repeat
  // must not get it.
  absl::StatusOr<int64_t> first = Count("local", true, Rpc::kAuto);
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<int64_t> again = Count("local", true, Rpc::kAuto);
  if (GetParam() == Path::kRouted) {
    EXPECT_EQ(again.value_or(-1), *first);  // through the router: gRPC, replayed
  } else {
    EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists) << again.status();
  }
  EXPECT_EQ(Runs(), 1);
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
  o.via_router = GetParam() == Path::kRouted;
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

INSTANTIATE_TEST_SUITE_P(Paths, ExactlyOnceTest,
                         ::testing::Values(Path::kDirect, Path::kRouted, Path::kLookaside),
                         [](const auto& info) {
                           switch (info.param) {
                             case Path::kDirect:
                               return "Direct";
                             case Path::kRouted:
                               return "Routed";
                             case Path::kLookaside:
                               break;
                           }
                           return "Lookaside";
                         });

}  // namespace
}  // namespace farcall
