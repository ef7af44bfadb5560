// Lookaside routing end to end: a client given a router asks it for agents
// (Router.Resolve) and calls them directly; it goes on past an agent that
// died and while the router is away, and goes through the router when an
// agent refuses its token. Real agents and routers on loopback ports.
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/rendezvous.h"
#include "farcall/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/capability_keys.h"
#include "tests/process_harness.h"
#include "tests/test_calls.h"

namespace farcall {
namespace {

using ::farcall::testing::CallOnFour;
using ::farcall::testing::ChildProcess;
using ::testing::HasSubstr;

std::unique_ptr<ChildProcess> Start(const std::string& binary, std::vector<std::string> args) {
  args.insert(args.begin(), "--listen=127.0.0.1:0");
  auto p = ChildProcess::Start(binary, args);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? *std::move(p) : nullptr;
}

// Two agents and a router in front of them, serving /metrics.
class LookasideTest : public ::testing::Test {
 protected:
  void SetUp() override {
    a_ = Start(FARCALL_AGENT_BIN, {});
    b_ = Start(FARCALL_AGENT_BIN, {});
    ASSERT_TRUE(a_ && b_);
    router_ = Start(FARCALL_ROUTER_BIN, {"--metrics_listen=127.0.0.1:0",
                                         "--agents=" + a_->address() + "," + b_->address()});
    ASSERT_TRUE(router_);
    auto client = Client::Connect(router_->address());
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
  }

  // The agent's id, as it describes itself.
  std::string Id(const ChildProcess& agent) const {
    auto c = Client::Connect(agent.address());
    EXPECT_TRUE(c.ok());
    absl::StatusOr<AgentDescription> d = c.ok() ? (*c)->Describe() : c.status();
    EXPECT_TRUE(d.ok()) << d.status();
    return d.ok() ? d->agent_id : "";
  }
  double RouterMetric(const std::string& name) const {
    return testing::MetricValue(testing::HttpGet(router_->metrics_port(), "/metrics"), name);
  }

  std::unique_ptr<ChildProcess> a_, b_, router_;
  std::unique_ptr<Client> client_;
};

TEST_F(LookasideTest, CallsGoStraightToTheAgentsTheRouterNames) {
  std::set<std::string> agents;
  for (int i = 0; i < 40; ++i) {
    CallOptions o;
    o.rpc = i % 2 ? Rpc::kUnary : Rpc::kStream;
    o.allow_shm = false;
    absl::StatusOr<CallResult> r = CallOnFour(*client_, "copy", o);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_FALSE(r->via_router);
    EXPECT_EQ(r->results[0].as<float>()[3], 4);
    agents.insert(r->agent_id);
  }
  EXPECT_EQ(agents, (std::set<std::string>{Id(*a_), Id(*b_)}));  // both take calls
  // The router answered Resolve (once per probe interval at most), not calls.
  EXPECT_GE(
      RouterMetric("farcall_router_resolves_total{code=\"OK\",handler=\"copy\",platform=\"cpu\"}"),
      1);
  // No call passed through it: the series is not there yet (-1).
  EXPECT_LE(
      RouterMetric(
          "farcall_router_calls_total{code=\"OK\",handler=\"copy\",platform=\"cpu\",tenant=\"-\"}"),
      0);
  // Yet its list (and status page) shows the calls, as the agents count them.
  absl::StatusOr<std::vector<AgentStatus>> listed = client_->ListAgents(/*refresh=*/true);
  ASSERT_TRUE(listed.ok()) << listed.status();
  uint64_t total = 0;
  for (const AgentStatus& a : *listed) {
    EXPECT_EQ(a.calls_total, a.info.calls_total);
    EXPECT_EQ(a.info.failed_calls_total, 0u);
    total += a.calls_total;
  }
  EXPECT_GE(total, 40u);
  // Same-host agents found through the router offer shared memory too.
  absl::StatusOr<CallResult> shm = CallOnFour(*client_, "copy", testing::SharedMemoryAtAnySize());
  ASSERT_TRUE(shm.ok()) << shm.status();
  EXPECT_EQ(shm->transport, Transport::kShm);

  CallOptions proxy;
  proxy.via_router = true;
  absl::StatusOr<CallResult> r = CallOnFour(*client_, "copy", proxy);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->via_router);
  EXPECT_EQ(
      RouterMetric(
          "farcall_router_calls_total{code=\"OK\",handler=\"copy\",platform=\"cpu\",tenant=\"-\"}"),
      1);
}

TEST_F(LookasideTest, TheRouterWeighsAgentsByTheCallsTheyHoldFromAnyClient) {
  // Another client keeps agent a busy, straight to its address.
  auto busy_client = Client::Connect(a_->address());
  ASSERT_TRUE(busy_client.ok());
  CallRequest sleep;
  sleep.handler = "sleep";
  sleep.attributes["ms"] = int64_t{3000};
  auto busy = (*busy_client)->CallFuture(sleep);
  // CallFuture returns at once; the call reaches a a moment later.
  bool holding = false;
  for (absl::Time end = absl::Now() + absl::Seconds(20); !holding && absl::Now() < end;) {
    absl::StatusOr<AgentDescription> d = (*busy_client)->Describe();
    holding = d.ok() && d->inflight_calls >= 1;
  }
  ASSERT_TRUE(holding);
  // Once the router has probed a holding it, new clients are sent to b.
  bool seen = false;
  for (int round = 0; round < 50 && !seen; ++round) {
    auto agents = client_->ListAgents(/*refresh=*/true);
    ASSERT_TRUE(agents.ok()) << agents.status();
    // ListAgents shows the router's own count; Resolve's order is the test.
    auto fresh = Client::Connect(router_->address());
    ASSERT_TRUE(fresh.ok());
    absl::StatusOr<CallResult> r = CallOnFour(**fresh);
    ASSERT_TRUE(r.ok()) << r.status();
    seen = r->agent_id == Id(*b_);
  }
  ASSERT_TRUE(seen);
  for (int i = 0; i < 10; ++i) {
    auto fresh = Client::Connect(router_->address());
    ASSERT_TRUE(fresh.ok());
    absl::StatusOr<CallResult> r = CallOnFour(**fresh);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->agent_id, Id(*b_)) << i;
  }
  EXPECT_TRUE(busy.get().ok());
}

TEST_F(LookasideTest, RefusedCallsGetTheSameAnswerAsThroughTheRouter) {
  CallOptions proxy;
  proxy.via_router = true;
  for (const char* platform : {"cpu", "gpu", "CUDA", "tpu"}) {
    absl::StatusOr<CallResult> direct = CallOnFour(*client_, "softpls", {}, platform);
    absl::StatusOr<CallResult> routed = CallOnFour(*client_, "softpls", proxy, platform);
    ASSERT_FALSE(direct.ok());
    EXPECT_EQ(direct.status(), routed.status()) << platform;
    // Exactly the contract's words: nothing added on the way.
    EXPECT_FALSE(direct.status().GetPayload("type.farcall.dev/not-delivered").has_value());
  }
  EXPECT_EQ(CallOnFour(*client_, "softpls").status().message(),
            "handler 'softpls' is not registered for platform 'cpu'. Registered there: add, "
            "axpy, copy, crc32c, fail, scale, sleep, sum.");
}

// A call that fails on an agent the client called directly never passes
// the router; the router's status page shows it all the same, from the
// agent's own report.
TEST_F(LookasideTest, TheStatusPageShowsFailuresOfCallsThatWentStraightToAgents) {
  CallRequest fail;
  fail.platform = "cpu";
  fail.handler = "fail";
  fail.attributes = {{"code", int64_t{9}}, {"message", std::string("not ready (lookaside)")}};
  absl::StatusOr<CallResult> r = client_->Call(fail);
  ASSERT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
  ASSERT_TRUE(
      client_->ListAgents(/*refresh=*/true).ok());  // a probe: the agents describe themselves
  const std::string page = testing::HttpGet(router_->metrics_port(), "/status.json");
  EXPECT_THAT(page, HasSubstr("\"last_call_error\":\"FAILED_PRECONDITION: not ready (lookaside)\""))
      << page;
}

TEST_F(LookasideTest, ACallThatCannotReachItsAgentGoesToAnother) {
  // Both agents are known and connected first.
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(CallOnFour(*client_).ok());
  a_->Kill();
  // Before any probe of the router notices: each call that picks the dead
  // agent is sent to the other one, in the sync and the async form alike.
  for (int i = 0; i < 10; ++i) {
    absl::StatusOr<CallResult> r = CallOnFour(*client_);
    ASSERT_TRUE(r.ok()) << i << ": " << r.status();
    EXPECT_EQ(r->agent_id, Id(*b_));
    EXPECT_FALSE(r->via_router);
    std::vector<float> x = {1, 2, 3, 4};
    absl::StatusOr<CallResult> f =
        client_->CallFuture(::farcall::testing::RequestOnFour("copy", x)).get();
    ASSERT_TRUE(f.ok()) << i << ": " << f.status();
    EXPECT_EQ(f->agent_id, Id(*b_));
  }
}

// A call with side effects whose call_id the caller chose may repeat one
// that ran: it goes only to the agent that would hold that id (as the
// router's rendezvous choice would), never to another, which would run it
// again. One whose id the client made is new everywhere, and goes on past
// an agent that is away.
TEST_F(LookasideTest, ASideEffectCallWithTheCallersIdGoesOnlyWhereItsRepeatWould) {
  // A router that probes once a minute keeps naming a after it dies, as
  // any router does until its next probe.
  std::unique_ptr<ChildProcess> router =
      Start(FARCALL_ROUTER_BIN,
            {"--probe_interval_ms=60000", "--agents=" + a_->address() + "," + b_->address()});
  ASSERT_TRUE(router);
  auto connected = Client::Connect(router->address());
  ASSERT_TRUE(connected.ok()) << connected.status();
  Client& client = **connected;
  // An id whose agent is a.
  std::string id;
  for (int i = 0; id.empty(); ++i) {
    const std::string candidate = absl::StrCat("repeat-", i);
    if (RendezvousScore(candidate, a_->address()) > RendezvousScore(candidate, b_->address())) {
      id = candidate;
    }
  }
  CallOptions keyed;
  keyed.call_id = id;
  keyed.allow_shm = false;
  std::vector<float> x = {1, 2, 3, 4};
  CallRequest side_effect = ::farcall::testing::RequestOnFour("copy", x);
  side_effect.has_side_effect = true;
  absl::StatusOr<CallResult> first = client.Call(side_effect, keyed);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->agent_id, Id(*a_));
  a_->Kill();
  // The first try meets the broken connection, and a is left out for a
  // while; the repeats still never go to b.
  absl::StatusOr<CallResult> r = client.Call(side_effect, keyed);
  ASSERT_FALSE(r.ok()) << "ran on " << r->agent_id;
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();
  const std::string unreachable =
      absl::StrCat("cannot reach ", a_->address(), ", the agent that would hold call ", id,
                   " (a call with side effects goes only where a repeat of it would): try "
                   "again later.");
  r = client.Call(side_effect, keyed);
  ASSERT_FALSE(r.ok()) << "ran on " << r->agent_id;
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();
  EXPECT_EQ(r.status().message(), unreachable);
  r = client.CallFuture(side_effect, keyed).get();
  ASSERT_FALSE(r.ok()) << "ran on " << r->agent_id;
  EXPECT_EQ(r.status().message(), unreachable);
  // A stopped call ends CANCELLED, as any stopped call does, not with the
  // lookaside's own refusal.
  auto stop = std::make_shared<CallStop>();
  stop->Stop();
  CallOptions stopped = keyed;
  stopped.stop = stop;
  r = client.Call(side_effect, stopped);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kCancelled) << r.status();
  EXPECT_EQ(r.status().message(), "the caller stopped the call.");
  r = client.CallFuture(side_effect, stopped).get();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kCancelled) << r.status();
  // Without the caller's id, each call is new everywhere: a, left out, is
  // passed over.
  CallOptions fresh;
  fresh.allow_shm = false;
  for (int i = 0; i < 10; ++i) {
    r = client.Call(side_effect, fresh);
    ASSERT_TRUE(r.ok()) << i << ": " << r.status();
    EXPECT_EQ(r->agent_id, Id(*b_));
    r = client.CallFuture(side_effect, fresh).get();
    ASSERT_TRUE(r.ok()) << i << ": " << r.status();
    EXPECT_EQ(r->agent_id, Id(*b_));
  }
}

TEST_F(LookasideTest, CallsGoOnWhileTheRouterIsAway) {
  ASSERT_TRUE(CallOnFour(*client_).ok());
  router_->Kill();
  // The router's last answer still names live agents.
  for (int i = 0; i < 5; ++i) {
    absl::StatusOr<CallResult> r = CallOnFour(*client_);
    ASSERT_TRUE(r.ok()) << i << ": " << r.status();
    EXPECT_FALSE(r->via_router);
  }
  // Through the router there is nothing to reach.
  CallOptions proxy;
  proxy.via_router = true;
  proxy.timeout = absl::Seconds(2);
  EXPECT_EQ(CallOnFour(*client_, "copy", proxy).status().code(), absl::StatusCode::kUnavailable);
}

// This host's first IPv4 address that is not loopback, or "" when it has
// none.
std::string NonLoopbackAddress() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return "";
  std::string found;
  for (ifaddrs* i = list; i != nullptr && found.empty(); i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    char text[INET_ADDRSTRLEN];
    const auto* in = reinterpret_cast<const sockaddr_in*>(i->ifa_addr);
    if (inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text)) == nullptr) continue;
    if (std::string(text).rfind("127.", 0) != 0) found = text;
  }
  freeifaddrs(list);
  return found;
}

// An agent's loopback address names the router's host. A client that
// reaches the router over the network must not call "127.0.0.1:PORT" on its
// own host, where anything may listen (an impostor agent): it goes through
// the router instead.
TEST(LookasideAddressTest, ALoopbackAgentOfARouterElsewhereIsNeverCalledDirectly) {
  const std::string host = NonLoopbackAddress();
  if (host.empty()) GTEST_SKIP() << "SKIPPED: this host has no address but loopback";
  auto agent = Start(FARCALL_AGENT_BIN, {});
  ASSERT_TRUE(agent);
  auto router = ChildProcess::Start(FARCALL_ROUTER_BIN,
                                    {"--listen=" + host + ":0", "--agents=" + agent->address()});
  ASSERT_TRUE(router.ok()) << router.status();
  auto client = Client::Connect(absl::StrCat(host, ":", (*router)->port()));
  ASSERT_TRUE(client.ok());
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<CallResult> r = CallOnFour(**client);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r->via_router) << "called the loopback agent a remote router named";
  }
}

// A capability is a bearer credential, as a token is: a client without TLS
// never sends one in clear to an agent beyond this host, though the router
// names the agent with one. The call goes through the router instead.
TEST(LookasideCapabilityTest, ACapabilityNeverTravelsInClearToAnotherHost) {
  const std::string host = NonLoopbackAddress();
  if (host.empty()) GTEST_SKIP() << "SKIPPED: this host has no address but loopback";
  char dir_template[] = "/tmp/farcall-lookaside-XXXXXX";
  const std::string dir = mkdtemp(dir_template);
  testing::WriteCapabilityKeys(dir);
  std::ofstream(dir + "/tokens") << "caller-token-0123456789 *\nrouter-token-0123456789 *\n";
  std::ofstream(dir + "/router-token") << "router-token-0123456789\n";
  auto agent = ChildProcess::Start(
      FARCALL_AGENT_BIN,
      {"--listen=" + host + ":0", "--capability_verify_keys_file=" + dir + "/capability-agents.pem",
       "--tokens_file=" + dir + "/tokens"});
  ASSERT_TRUE(agent.ok()) << agent.status();
  auto router =
      Start(FARCALL_ROUTER_BIN,
            {"--agents=" + host + ":" + std::to_string((*agent)->port()),
             "--tokens_file=" + dir + "/tokens", "--agent_token_file=" + dir + "/router-token",
             "--capability_signing_key_file=" + dir + "/capability-router.pem"});
  ASSERT_TRUE(router);
  ClientOptions caller;
  caller.token = "caller-token-0123456789";
  auto client = Client::Connect(router->address(), caller);
  ASSERT_TRUE(client.ok()) << client.status();
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<CallResult> r = CallOnFour(**client);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r->via_router) << "sent a capability in clear to " << host;
  }
  std::system(("rm -rf " + dir).c_str());
}

TEST(LookasideTokenTest, AnAgentThatRefusesTheCallersTokenIsReachedThroughTheRouter) {
  // The agent knows only the router's token; the router knows the caller's.
  char dir_template[] = "/tmp/farcall-lookaside-XXXXXX";
  const std::string dir = mkdtemp(dir_template);
  std::ofstream(dir + "/agent-tokens") << "router-token-0123456789 *\n";
  std::ofstream(dir + "/router-tokens") << "caller-token-0123456789 copy\n";
  std::ofstream(dir + "/router-token") << "router-token-0123456789\n";
  testing::WriteCapabilityKeys(dir);  // the agent trusts none: it ignores capabilities
  auto agent = Start(FARCALL_AGENT_BIN, {"--tokens_file=" + dir + "/agent-tokens"});
  ASSERT_TRUE(agent);
  auto router = Start(FARCALL_ROUTER_BIN,
                      {"--agents=" + agent->address(), "--tokens_file=" + dir + "/router-tokens",
                       "--agent_token_file=" + dir + "/router-token",
                       "--capability_signing_key_file=" + dir + "/capability-router.pem"});
  ASSERT_TRUE(router);
  ClientOptions caller;
  caller.token = "caller-token-0123456789";
  auto client = Client::Connect(router->address(), caller);
  ASSERT_TRUE(client.ok());
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<CallResult> r = CallOnFour(**client);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r->via_router);
  }
  // The router's own checks still apply to what it resolves.
  absl::StatusOr<CallResult> sum = CallOnFour(**client, "sum");
  EXPECT_EQ(sum.status().code(), absl::StatusCode::kPermissionDenied) << sum.status();
  ClientOptions stranger;
  stranger.token = "stranger";
  auto other = Client::Connect(router->address(), stranger);
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(CallOnFour(**other).status().code(), absl::StatusCode::kUnauthenticated);
  std::system(("rm -rf " + dir).c_str());
}

}  // namespace
}  // namespace farcall
