// Graceful drain (--drain_seconds): on SIGTERM an agent or router reports
// NOT_SERVING, takes no new calls, lets the calls in flight finish, and
// exits 0; the router sends new calls to the agents that remain.
#include <chrono>
#include <future>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/error_reason.h"
#include "farcall/client.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/process_harness.h"
#include "tests/test_calls.h"

namespace farcall {
namespace {

using ::farcall::testing::ChildProcess;
using ::farcall::testing::HoldsCalls;
using ::farcall::testing::HttpGet;
using ::farcall::testing::MetricValue;
using ::farcall::testing::SleepRequest;

// A sleep of `ms` through `client`, in the background.
std::future<absl::StatusOr<CallResult>> SleepInBackground(Client& client, int64_t ms,
                                                          bool side_effect = false) {
  CallOptions o;
  o.timeout = absl::Seconds(60);
  CallRequest sleep = SleepRequest(ms);
  sleep.has_side_effect = side_effect;
  return client.CallFuture(sleep, o);
}

// What a call cut by an agent's drain of 0.5 s gets.
void ExpectDrainCut(const absl::Status& s) {
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_EQ(s.message(),
            "this agent's drain for shutdown ran out (--drain_seconds=0.5) while the call ran: it "
            "was cut, and its handler may have run in part.");
  EXPECT_EQ(ReasonOf(s), ErrorReason::kDrainCut) << s;
  EXPECT_FALSE(DidNotRun(s));
}

// The server's own health answer: SERVING, NOT_SERVING, or the RPC's
// error once it takes no calls at all.
std::string Health(const std::string& address) {
  auto stub = grpc::health::v1::Health::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  grpc::health::v1::HealthCheckResponse resp;
  grpc::Status s = stub->Check(&ctx, {}, &resp);
  if (!s.ok()) return absl::StrCat("error ", s.error_code());
  return grpc::health::v1::HealthCheckResponse::ServingStatus_Name(resp.status());
}

// An agent that drains for `drain`, holding one call that sleeps `ms`.
struct BusyAgent {
  std::unique_ptr<ChildProcess> agent;
  std::unique_ptr<Client> client;
  std::future<absl::StatusOr<CallResult>> held;
};

absl::StatusOr<BusyAgent> StartBusyAgent(const std::string& drain, int64_t ms,
                                         bool side_effect = false) {
  BusyAgent b;
  auto agent = ChildProcess::Start(FARCALL_AGENT_BIN,
                                   {"--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0",
                                    absl::StrCat("--drain_seconds=", drain)});
  if (!agent.ok()) return agent.status();
  b.agent = *std::move(agent);
  auto client = Client::Connect(b.agent->address());
  if (!client.ok()) return client.status();
  b.client = *std::move(client);
  b.held = SleepInBackground(*b.client, ms, side_effect);
  if (!HoldsCalls(*b.agent, 1)) return absl::InternalError("the agent never held the call");
  return b;
}

TEST(DrainTest, AnAgentFinishesItsCallsRefusesNewOnesAndExitsZero) {
  // Longer than the fixed 2 s an agent used to give calls at shutdown.
  absl::StatusOr<BusyAgent> b = StartBusyAgent("20", 2500);
  ASSERT_TRUE(b.ok()) << b.status();
  ChildProcess& agent = *b->agent;
  const pid_t pid = agent.pid();
  auto exit_code = std::async(std::launch::async, [&] { return agent.Terminate(); });
  // Once it drains, health says so (or the server refuses the RPC itself)...
  const std::string address = absl::StrCat("127.0.0.1:", agent.port());
  std::string health = "SERVING";
  for (int i = 0; i < 2000 && health == "SERVING"; ++i) health = Health(address);
  EXPECT_NE(health, "SERVING");
  // ...a new call is refused as never accepted (a router would go elsewhere)...
  const absl::Time end = absl::Now() + absl::Seconds(10);
  absl::Status refused;
  do {
    CallOptions quick;
    quick.timeout = absl::Seconds(2);
    quick.allow_shm = false;
    refused = testing::CallOnFour(*b->client, "copy", quick).status();
  } while (refused.ok() && absl::Now() < end);
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable) << refused;
  EXPECT_EQ(refused.message(), "this agent is draining for shutdown and takes no new calls.");
  // ...and the call it held still succeeds, after which it exits 0.
  absl::StatusOr<CallResult> r = b->held.get();
  EXPECT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(exit_code.get(), 0) << "agent " << pid;
}

// A call still in its handler when the drain runs out is answered by the
// agent itself, with the contract's message and reason DRAIN_CUT (not gRPC's
// "Cancelling all calls"); its handler is told to stop, and the agent exits.
TEST(DrainTest, ACallStillRunningWhenTheDrainEndsIsAnsweredDrainCut) {
  absl::StatusOr<BusyAgent> b = StartBusyAgent("0.5", 50000, /*side_effect=*/true);
  ASSERT_TRUE(b.ok()) << b.status();
  const absl::Time start = absl::Now();
  EXPECT_EQ(b->agent->Terminate(), 0);
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  ExpectDrainCut(b->held.get().status());
}

// Through a router, a call the agent's shutdown cut short is UNAVAILABLE:
// CANCELLED would say that the caller cancelled it. (A call with side
// effects, which the agent accepts at once: the router never sends it
// elsewhere.)
TEST(DrainTest, ThroughARouterACallCutShortByTheDrainIsUnavailableNotCancelled) {
  auto agent = ChildProcess::Start(
      FARCALL_AGENT_BIN,
      {"--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0", "--drain_seconds=0.5"});
  ASSERT_TRUE(agent.ok()) << agent.status();
  auto router = ChildProcess::Start(
      FARCALL_ROUTER_BIN, {"--listen=127.0.0.1:0", absl::StrCat("--agents=", (*agent)->address())});
  ASSERT_TRUE(router.ok()) << router.status();
  auto client = Client::Connect((*router)->address());
  ASSERT_TRUE(client.ok());
  CallOptions o;
  o.timeout = absl::Seconds(60);
  o.via_router = true;
  CallRequest sleep = SleepRequest(50000);
  sleep.has_side_effect = true;
  auto held = (*client)->CallFuture(sleep, o);
  ASSERT_TRUE(HoldsCalls(**agent, 1));
  EXPECT_EQ((*agent)->Terminate(), 0);
  // The agent's own answer, passed on (never CANCELLED, which would say
  // that the caller cancelled it).
  ExpectDrainCut(held.get().status());
}

TEST(DrainTest, TheRouterSendsNewCallsToTheAgentsThatRemain) {
  std::vector<std::unique_ptr<ChildProcess>> agents;
  for (int i = 0; i < 2; ++i) {
    auto a = ChildProcess::Start(
        FARCALL_AGENT_BIN,
        {"--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0", "--drain_seconds=20"});
    ASSERT_TRUE(a.ok()) << a.status();
    agents.push_back(*std::move(a));
  }
  auto router = ChildProcess::Start(
      FARCALL_ROUTER_BIN,
      {"--listen=127.0.0.1:0", "--probe_interval_ms=100", "--drain_seconds=20",
       absl::StrCat("--agents=", agents[0]->address(), ",", agents[1]->address())});
  ASSERT_TRUE(router.ok()) << router.status();
  auto client = Client::Connect((*router)->address());
  ASSERT_TRUE(client.ok());
  auto held = SleepInBackground(**client, 1500);
  // Which agent took it: that one is told to stop.
  int busy = -1;
  const absl::Time end = absl::Now() + absl::Seconds(20);
  while (busy < 0 && absl::Now() < end) {
    for (int i = 0; i < 2; ++i) {
      if (MetricValue(HttpGet(agents[i]->metrics_port(), "/metrics"),
                      "farcall_agent_inflight_calls") == 1) {
        busy = i;
      }
    }
  }
  ASSERT_GE(busy, 0);
  auto exit_code = std::async(std::launch::async, [&] { return agents[busy]->Terminate(); });
  // Every call from now on lands on the other agent and succeeds.
  CallOptions o;
  o.timeout = absl::Seconds(20);
  for (int i = 0; i < 20; ++i) {
    auto r = testing::CallOnFour(**client, "copy", o);
    ASSERT_TRUE(r.ok()) << "call " << i << ": " << r.status();
    EXPECT_THAT(r->agent_id,
                ::testing::StartsWith(absl::StrCat("cpu-agent-", agents[1 - busy]->port(), "-")));
  }
  absl::StatusOr<CallResult> r = held.get();
  EXPECT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(exit_code.get(), 0);
}

// The only agent with a handler drains; the live one lacks it. Calls for
// the handler get the contract's NOT_FOUND naming what the live agent has,
// whether the router still sent them to the draining agent (its refusal is
// retried) or already knew: never "no live agent" while one is live.
TEST(DrainTest, WhenTheOnlyAgentWithAHandlerDrainsTheAnswerIsNotFound) {
  auto with = ChildProcess::Start(
      FARCALL_AGENT_BIN,
      {"--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0", "--drain_seconds=20",
       absl::StrCat("--plugins=", FARCALL_SIDE_EFFECT_PLUGIN)});
  ASSERT_TRUE(with.ok()) << with.status();
  auto without = ChildProcess::Start(FARCALL_AGENT_BIN, {"--listen=127.0.0.1:0"});
  ASSERT_TRUE(without.ok()) << without.status();
  auto router = ChildProcess::Start(
      FARCALL_ROUTER_BIN,
      {"--listen=127.0.0.1:0", "--probe_interval_ms=100",
       absl::StrCat("--agents=", (*with)->address(), ",", (*without)->address())});
  ASSERT_TRUE(router.ok()) << router.status();
  auto client = Client::Connect((*router)->address());
  ASSERT_TRUE(client.ok());
  CallRequest count;
  count.handler = "test.count";
  count.results = {TensorSpec{DType::kS64, {1}}};
  CallOptions o;
  o.timeout = absl::Seconds(20);
  o.wait_for_ready = true;
  ASSERT_TRUE((*client)->Call(count, o).ok());
  // A call held on it keeps it draining once told to stop.
  auto direct = Client::Connect((*with)->address());
  ASSERT_TRUE(direct.ok());
  auto held = SleepInBackground(**direct, 3000);
  ASSERT_TRUE(HoldsCalls(**with, 1));
  auto exit_code = std::async(std::launch::async, [&] { return (*with)->Terminate(); });
  // Until the drain ends: NOT_FOUND, with what the live agent has.
  int not_found = 0;
  while (held.wait_for(std::chrono::milliseconds(0)) != std::future_status::ready) {
    absl::StatusOr<CallResult> r = (*client)->Call(count, o);
    if (r.ok()) continue;  // before it heard of the signal
    EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound) << r.status();
    EXPECT_THAT(r.status().message(),
                ::testing::HasSubstr("handler 'test.count' is not registered for platform 'cpu'"));
    EXPECT_THAT(r.status().message(), ::testing::HasSubstr("copy"));
    ++not_found;
  }
  EXPECT_GT(not_found, 0);
  EXPECT_TRUE(held.get().ok());
  EXPECT_EQ(exit_code.get(), 0);
}

TEST(DrainTest, ARouterFinishesTheCallsItCarriesAndExitsZero) {
  auto agent = ChildProcess::Start(FARCALL_AGENT_BIN,
                                   {"--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0"});
  ASSERT_TRUE(agent.ok()) << agent.status();
  auto router =
      ChildProcess::Start(FARCALL_ROUTER_BIN, {"--listen=127.0.0.1:0", "--drain_seconds=20",
                                               absl::StrCat("--agents=", (*agent)->address())});
  ASSERT_TRUE(router.ok()) << router.status();
  auto client = Client::Connect((*router)->address());
  ASSERT_TRUE(client.ok());
  auto held = SleepInBackground(**client, 1500);
  ASSERT_TRUE(HoldsCalls(**agent, 1));
  EXPECT_EQ((*router)->Terminate(), 0);  // returns once drained
  absl::StatusOr<CallResult> r = held.get();
  EXPECT_TRUE(r.ok()) << r.status();
}

// A call a router still carries when its drain runs out (after the GOAWAY a
// second in) is answered by the router itself, with the contract's message
// and reason DRAIN_CUT, unary and streamed alike; the agent's call is
// cancelled, so its handler stops.
TEST(DrainTest, ACallARouterStillCarriesWhenItsDrainEndsIsAnsweredDrainCut) {
  auto agent = ChildProcess::Start(FARCALL_AGENT_BIN,
                                   {"--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0"});
  ASSERT_TRUE(agent.ok()) << agent.status();
  auto router =
      ChildProcess::Start(FARCALL_ROUTER_BIN, {"--listen=127.0.0.1:0", "--drain_seconds=1.5",
                                               absl::StrCat("--agents=", (*agent)->address())});
  ASSERT_TRUE(router.ok()) << router.status();
  auto client = Client::Connect((*router)->address());
  ASSERT_TRUE(client.ok());
  std::vector<std::future<absl::StatusOr<CallResult>>> held;
  for (Rpc rpc : {Rpc::kUnary, Rpc::kStream}) {
    CallOptions o;
    o.timeout = absl::Seconds(60);
    o.via_router = true;
    o.rpc = rpc;
    CallRequest sleep = SleepRequest(50000);
    sleep.has_side_effect = true;
    held.push_back((*client)->CallFuture(sleep, o));
  }
  ASSERT_TRUE(HoldsCalls(**agent, 2));
  const absl::Time start = absl::Now();
  EXPECT_EQ((*router)->Terminate(), 0);
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  for (auto& h : held) {
    absl::Status s = h.get().status();
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
    EXPECT_EQ(s.message(),
              "this router's drain for shutdown ran out (--drain_seconds=1.5) while the call ran: "
              "it was cut, and its handler may have run in part.");
    EXPECT_EQ(ReasonOf(s), ErrorReason::kDrainCut) << s;
  }
  EXPECT_TRUE(HoldsCalls(**agent, 0)) << "the agent's sleeps were not cancelled";
}

}  // namespace
}  // namespace farcall
