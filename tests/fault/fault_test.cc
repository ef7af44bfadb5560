// What a caller sees when something fails around its call, and what is left
// behind: each case asserts the call's outcome, that the agents and routers
// that survive hold no calls or bytes afterwards (their in-flight gauges),
// and that they go on serving.
//
// Cases elsewhere, not repeated here: a stalled uploader or reader
// (tests/stalled_client_test.cc), SIGTERM during a call (tests/drain_test.cc),
// a client cancel mid-upload (tests/metrics_e2e_test.cc), an agent restart
// under a shared-memory client (tests/shm_test.cc), and a dead agent behind
// a router (conformance_test's RouterFailoverTest).
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "farcall/client.h"
#include "farcall/v1/farcall.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/process_harness.h"
#include "tests/test_calls.h"

namespace farcall {
namespace {

using ::farcall::testing::ChildProcess;
using ::farcall::testing::HttpGet;
using ::farcall::testing::MetricValue;

std::unique_ptr<ChildProcess> Start(const std::string& bin, std::vector<std::string> args) {
  args.insert(args.begin(), {"--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0"});
  auto p = ChildProcess::Start(bin, args);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? *std::move(p) : nullptr;
}

double Gauge(const ChildProcess& p, const std::string& series) {
  return MetricValue(HttpGet(p.metrics_port(), "/metrics"), series);
}

// Waits, bounded, until `series` on `p` reads `value`; true if it did.
bool Reaches(const ChildProcess& p, const std::string& series, double value) {
  const absl::Time end = absl::Now() + absl::Seconds(20);
  while (absl::Now() < end) {
    if (Gauge(p, series) == value) return true;
  }
  return false;
}

// An agent holds nothing: no call, no byte of budget.
void ExpectIdle(const ChildProcess& agent) {
  EXPECT_TRUE(Reaches(agent, "farcall_agent_inflight_calls", 0));
  EXPECT_TRUE(Reaches(agent, "farcall_agent_inflight_bytes", 0));
}

// A router holds no call on `agent`.
void ExpectRouterIdle(const ChildProcess& router, const ChildProcess& agent) {
  EXPECT_TRUE(Reaches(
      router, absl::StrCat("farcall_router_agent_inflight_calls{agent=\"", agent.address(), "\"}"),
      0));
}

v1::TensorSpec U8(int64_t n) {
  v1::TensorSpec s;
  s.set_dtype(v1::U8);
  s.add_dims(n);
  return s;
}

// A copy of u8[n] whose first message carries `send` bytes of the arg.
v1::ExecuteRequest CopyRequest(int64_t n, int64_t send) {
  v1::ExecuteRequest r;
  v1::CallHeader* h = r.mutable_header();
  h->set_handler("copy");
  h->add_platforms("cpu");
  *h->add_args() = U8(n);
  *h->add_results() = U8(n);
  if (send > 0) {
    v1::Chunk* c = r.add_chunks();
    c->set_index(0);
    c->set_offset(0);
    c->set_data(std::string(static_cast<size_t>(send), 3));
  }
  return r;
}

// The service a raw stream talks to: the agent's or the router's Execute.
std::unique_ptr<grpc::ClientReaderWriter<v1::ExecuteRequest, v1::ExecuteResponse>> Execute(
    const std::string& address, bool router, grpc::ClientContext* ctx) {
  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  if (router) return v1::Router::NewStub(channel)->Execute(ctx);
  return v1::Agent::NewStub(channel)->Execute(ctx);
}

class AgentKilledTest : public ::testing::TestWithParam<bool> {};  // through a router?

TEST_P(AgentKilledTest, MidUploadTheCallerGetsUnavailableAndNothingIsLeft) {
  const bool routed = GetParam();
  auto victim = Start(FARCALL_AGENT_BIN, {});
  auto survivor = Start(FARCALL_AGENT_BIN, {});
  ASSERT_TRUE(victim && survivor);
  std::unique_ptr<ChildProcess> router;
  if (routed) {
    // Only the victim at first, so that the call lands there.
    router = Start(FARCALL_ROUTER_BIN, {"--agents=" + victim->address()});
    ASSERT_TRUE(router);
  }
  grpc::ClientContext ctx;
  auto stream = Execute(routed ? router->address() : victim->address(), routed, &ctx);
  ASSERT_TRUE(stream->Write(CopyRequest(8 << 20, 1 << 20)));  // 1 of 8 MiB sent
  ASSERT_TRUE(Reaches(*victim, "farcall_agent_inflight_calls", 1));
  victim->Kill();
  v1::ExecuteResponse resp;
  while (stream->Read(&resp)) {
  }
  grpc::Status s = stream->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  if (routed) {
    ExpectRouterIdle(*router, *victim);
    // Its next health probe finds the agent gone.
    EXPECT_TRUE(Reaches(
        *router,
        absl::StrCat("farcall_router_agent_up{agent=\"", victim->address(), "\",platform=\"cpu\"}"),
        0));
  }
  // Other agents serve on.
  auto client = Client::Connect(survivor->address());
  ASSERT_TRUE(client.ok());
  EXPECT_TRUE(testing::CallOnFour(**client).ok());
  ExpectIdle(*survivor);
}

TEST_P(AgentKilledTest, MidDownloadTheCallerGetsAnErrorNeverAShortResult) {
  const bool routed = GetParam();
  auto victim = Start(FARCALL_AGENT_BIN, {"--response_chunk_bytes=65536"});
  ASSERT_TRUE(victim);
  std::unique_ptr<ChildProcess> router;
  if (routed) {
    router = Start(FARCALL_ROUTER_BIN, {"--agents=" + victim->address()});
    ASSERT_TRUE(router);
  }
  constexpr int64_t kN = 32 << 20;
  grpc::ClientContext ctx;
  auto stream = Execute(routed ? router->address() : victim->address(), routed, &ctx);
  // The whole arg, in 1 MiB messages; then read one result frame only.
  v1::ExecuteRequest first = CopyRequest(kN, 0);
  ASSERT_TRUE(stream->Write(first));
  for (int64_t off = 0; off < kN; off += 1 << 20) {
    v1::ExecuteRequest more;
    v1::Chunk* c = more.add_chunks();
    c->set_index(0);
    c->set_offset(static_cast<uint64_t>(off));
    c->set_data(std::string(1 << 20, 5));
    ASSERT_TRUE(stream->Write(more));
  }
  ASSERT_TRUE(stream->WritesDone());
  v1::ExecuteResponse resp;
  ASSERT_TRUE(stream->Read(&resp));
  victim->Kill();
  int64_t received = 0;
  for (const v1::Chunk& c : resp.chunks()) received += static_cast<int64_t>(c.data().size());
  while (stream->Read(&resp)) {
    for (const v1::Chunk& c : resp.chunks()) received += static_cast<int64_t>(c.data().size());
  }
  grpc::Status s = stream->Finish();
  // Some frames may have been in flight, but the call never ends OK short.
  EXPECT_FALSE(s.ok() && received < kN) << "an OK call with " << received << " of " << kN;
  EXPECT_FALSE(s.ok()) << "the agent died before sending everything";
  if (routed) ExpectRouterIdle(*router, *victim);
}

INSTANTIATE_TEST_SUITE_P(DirectAndRouted, AgentKilledTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Routed" : "Direct"; });

TEST(FaultTest, ADeadlineEndsTheCallAndFreesEverything) {
  auto agent = Start(FARCALL_AGENT_BIN, {});
  ASSERT_TRUE(agent);
  auto router = Start(FARCALL_ROUTER_BIN, {"--agents=" + agent->address()});
  ASSERT_TRUE(router);
  for (const std::string& target : {agent->address(), router->address()}) {
    auto client = Client::Connect(target);
    ASSERT_TRUE(client.ok());
    CallRequest sleep;
    sleep.handler = "sleep";
    sleep.attributes["ms"] = int64_t{30000};
    CallOptions o;
    o.timeout = absl::Milliseconds(300);
    const absl::Time start = absl::Now();
    EXPECT_EQ((*client)->Call(sleep, o).status().code(), absl::StatusCode::kDeadlineExceeded);
    EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  }
  ExpectIdle(*agent);
  ExpectRouterIdle(*router, *agent);
}

TEST(FaultTest, OutOfDeviceMemoryIsResourceExhaustedAndTheAgentServesOn) {
  // Limits far past the host's memory, so that the allocation itself fails
  // (the fault injected: a device without room for the tensors).
  auto agent = Start(FARCALL_AGENT_BIN,
                     {"--max_call_bytes=4398046511104", "--max_inflight_bytes=8796093022208"});
  ASSERT_TRUE(agent);
  grpc::ClientContext ctx;
  auto stream = Execute(agent->address(), false, &ctx);
  ASSERT_TRUE(stream->Write(CopyRequest(int64_t{1} << 41, 0)));  // 2 TiB, then 2 more
  v1::ExecuteResponse resp;
  while (stream->Read(&resp)) {
  }
  grpc::Status s = stream->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_THAT(s.error_message(), ::testing::HasSubstr("out of host memory"));
  ExpectIdle(*agent);
  auto client = Client::Connect(agent->address());
  ASSERT_TRUE(client.ok());
  EXPECT_TRUE(testing::CallOnFour(**client).ok());
}

TEST(FaultTest, AnInjectedOutOfMemoryFailsOnlyItsCallAndTheRouterPassesItOn) {
  // Every 3rd allocation of the device fails (a call allocates an arg and a
  // result), as a real device out of memory does.
  auto agent = Start(FARCALL_AGENT_BIN, {"--inject_faults=allocate=3"});
  ASSERT_TRUE(agent);
  auto router = Start(FARCALL_ROUTER_BIN, {"--agents=" + agent->address()});
  ASSERT_TRUE(router);
  auto client = Client::Connect(router->address());
  ASSERT_TRUE(client.ok());
  int ok = 0, exhausted = 0;
  CallOptions through;
  through.via_router = true;
  for (int i = 0; i < 6; ++i) {
    absl::StatusOr<CallResult> r = testing::CallOnFour(**client, "copy", through);
    if (r.ok()) {
      ++ok;
      continue;
    }
    EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << r.status();
    EXPECT_THAT(r.status().message(), ::testing::HasSubstr("out of device memory"));
    ++exhausted;
  }
  // A call asks for its arg, then its result: the 2nd, 4th and 6th calls
  // find no room (allocations 3, 6 and 9), the others run.
  EXPECT_EQ(exhausted, 3);
  EXPECT_EQ(ok, 3);
  // The agent answered each failure itself, and is still up.
  EXPECT_EQ(Gauge(*router, absl::StrCat("farcall_router_agent_up{agent=\"", agent->address(),
                                        "\",platform=\"cpu\"}")),
            1);
  ExpectIdle(*agent);
  ExpectRouterIdle(*router, *agent);
}

TEST(FaultTest, ALostDeviceTakesItsAgentOutOfTheRoutersChoice) {
  auto lost = Start(FARCALL_AGENT_BIN, {"--inject_faults=lose_device=1"});
  auto healthy = Start(FARCALL_AGENT_BIN, {});
  ASSERT_TRUE(lost && healthy);
  auto router =
      Start(FARCALL_ROUTER_BIN, {"--agents=" + lost->address() + "," + healthy->address()});
  ASSERT_TRUE(router);
  // Straight to the agent, so that the first launch is its own.
  auto direct = Client::Connect(lost->address());
  ASSERT_TRUE(direct.ok());
  absl::Status s = testing::CallOnFour(**direct).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_EQ(s.message(), "device 0 was lost (injected by --inject_faults=lose_device=1).");
  // For good: the agent has no device left to run anything on.
  absl::Status again = testing::CallOnFour(**direct).status();
  EXPECT_EQ(again.code(), absl::StatusCode::kUnavailable) << again;
  EXPECT_EQ(again.message(),
            "every cpu device of this agent has failed; the last error: device 0 was lost "
            "(injected by --inject_faults=lose_device=1).");
  EXPECT_EQ((*direct)->Health().code(), absl::StatusCode::kUnavailable);
  // The router's next probe takes it out; every call then goes to the other.
  EXPECT_TRUE(Reaches(
      *router,
      absl::StrCat("farcall_router_agent_up{agent=\"", lost->address(), "\",platform=\"cpu\"}"),
      0));
  auto client = Client::Connect(router->address());
  ASSERT_TRUE(client.ok());
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(testing::CallOnFour(**client).ok()) << i;
  ExpectIdle(*lost);
  ExpectIdle(*healthy);
  ExpectRouterIdle(*router, *lost);
}

TEST(FaultTest, ClientsOfARestartedRouterReconnectByThemselves) {
  auto agent = Start(FARCALL_AGENT_BIN, {});
  ASSERT_TRUE(agent);
  auto router = Start(FARCALL_ROUTER_BIN, {"--agents=" + agent->address()});
  ASSERT_TRUE(router);
  const int port = router->port();
  auto client = Client::Connect(router->address());
  ASSERT_TRUE(client.ok());
  // Through the router: a call that goes to the agent directly does not
  // need the router once it knows the agent (lookaside_test).
  CallOptions o;
  o.via_router = true;
  ASSERT_TRUE(testing::CallOnFour(**client, "copy", o).ok());
  router->Kill();
  o.timeout = absl::Milliseconds(500);
  EXPECT_EQ(testing::CallOnFour(**client, "copy", o).status().code(),
            absl::StatusCode::kUnavailable);
  auto again = ChildProcess::Start(FARCALL_ROUTER_BIN, {absl::StrCat("--listen=127.0.0.1:", port),
                                                        "--agents=" + agent->address()});
  ASSERT_TRUE(again.ok()) << again.status();
  // The same client object, no new Connect: it finds the new router. On a
  // loaded machine the new router may answer before it reached the agent
  // (no live agent yet, which no handler ran): the calls go again.
  o.timeout = absl::Seconds(20);
  o.wait_for_ready = true;
  o.retries = 10;
  for (int i = 0; i < 5; ++i) {
    absl::StatusOr<CallResult> r = testing::CallOnFour(**client, "copy", o);
    ASSERT_TRUE(r.ok()) << "call " << i << ": " << r.status();
  }
  ExpectIdle(*agent);
}

}  // namespace
}  // namespace farcall
