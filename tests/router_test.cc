// The router over real agents: failover when an agent dies and its return,
// and agents found through DNS. Run once per platform built, like the
// conformance suite (FARCALL_TEST_PLATFORM).
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "farcall/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/process_harness.h"
#include "tests/test_calls.h"
#include "tests/test_platform.h"

namespace farcall {
namespace {

using ::farcall::testing::AgentArgs;
using ::farcall::testing::CallOnFour;
using ::farcall::testing::ChildProcess;
using ::farcall::testing::TestPlatform;

// ---- Router failover --------------------------------------------------------

TEST(RouterFailoverTest, KeepsServingWhenAnAgentDiesAndUsesItAgainWhenBack) {
  SKIP_WITHOUT_DEVICE();
  auto a = ChildProcess::Start(FARCALL_AGENT_BIN, AgentArgs());
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = ChildProcess::Start(FARCALL_AGENT_BIN, AgentArgs());
  ASSERT_TRUE(b.ok()) << b.status();
  const std::string a_addr = (*a)->address();
  const int a_port = (*a)->port();
  auto router = ChildProcess::Start(
      FARCALL_ROUTER_BIN,
      {"--listen=127.0.0.1:0", absl::StrCat("--agents=", a_addr, ",", (*b)->address())});
  ASSERT_TRUE(router.ok()) << router.status();
  auto client = Client::Connect((*router)->address());
  ASSERT_TRUE(client.ok());

  auto copy_call = [&](Rpc t) {
    CallOptions o;
    o.rpc = t;
    return CallOnFour(**client, "copy", o, TestPlatform());
  };

  (*a)->Kill();
  // Every call succeeds: a call that cannot reach the dead agent is retried
  // on the other one before anything was sent.
  for (int i = 0; i < 20; ++i) {
    auto r = copy_call(i % 2 ? Rpc::kUnary : Rpc::kStream);
    ASSERT_TRUE(r.ok()) << "call " << i << ": " << r.status();
    EXPECT_THAT(r->agent_id,
                ::testing::StartsWith(absl::StrCat(TestPlatform(), "-agent-", (*b)->port(), "-")));
  }
  auto list = (*client)->ListAgents(/*refresh=*/true);
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0].address, a_addr);
  EXPECT_EQ((*list)[0].health, AgentStatus::Health::kDown);
  EXPECT_EQ((*list)[1].health, AgentStatus::Health::kServing);

  // The agent comes back on the same port and is used again.
  std::vector<std::string> args = AgentArgs();
  args[1] = absl::StrCat("--listen=127.0.0.1:", a_port);
  auto a2 = ChildProcess::Start(FARCALL_AGENT_BIN, args);
  ASSERT_TRUE(a2.ok()) << a2.status();
  // Each refresh probes and waits up to the probe deadline for the agent's
  // channel to reconnect; reconnect back-off may take a few rounds.
  bool serving = false;
  for (int round = 0; round < 20 && !serving; ++round) {
    list = (*client)->ListAgents(/*refresh=*/true);
    ASSERT_TRUE(list.ok());
    serving = (*list)[0].health == AgentStatus::Health::kServing;
  }
  EXPECT_TRUE(serving);
  (*b)->Kill();
  auto r = copy_call(Rpc::kUnary);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->agent_id,
              ::testing::StartsWith(absl::StrCat(TestPlatform(), "-agent-", a_port, "-")));
}

// ---- Discovery --------------------------------------------------------------

TEST(RouterDiscoveryTest, DnsSourceNamesEveryAgentItResolvesTo) {
  SKIP_WITHOUT_DEVICE();
  auto a = ChildProcess::Start(FARCALL_AGENT_BIN, AgentArgs());
  ASSERT_TRUE(a.ok()) << a.status();
  auto router = ChildProcess::Start(
      FARCALL_ROUTER_BIN,
      {"--listen=127.0.0.1:0", absl::StrCat("--agents=dns:///localhost:", (*a)->port())});
  ASSERT_TRUE(router.ok()) << router.status();
  auto client = Client::Connect((*router)->address());
  ASSERT_TRUE(client.ok());
  auto list = (*client)->ListAgents(/*refresh=*/true);
  ASSERT_TRUE(list.ok()) << list.status();
  bool found = false;
  for (const AgentStatus& e : *list) {
    if (e.address == (*a)->address()) {
      found = true;
      EXPECT_EQ(e.health, AgentStatus::Health::kServing);
    }
  }
  EXPECT_TRUE(found) << list->size() << " agents listed";

  auto r = CallOnFour(**client, "copy", {}, TestPlatform());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->agent_id,
              ::testing::StartsWith(absl::StrCat(TestPlatform(), "-agent-", (*a)->port(), "-")));
}

// A mistyped --agents entry stops the router at start (exit 2), naming
// it, instead of a router that serves and finds no agent.
TEST(RouterDiscoveryTest, AMistypedAgentsEntryStopsTheRouter) {
  for (const std::string entry : {"dns://farcall-agent-cpu:50051", "farcall-agent-cpu"}) {
    ::farcall::testing::CommandResult r = ::farcall::testing::RunCommand(
        absl::StrCat(FARCALL_ROUTER_BIN, " --listen=127.0.0.1:0 --agents=", entry, " 2>&1"));
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_THAT(r.output, ::testing::HasSubstr(absl::StrCat("--agents entry '", entry, "'")));
  }
}

}  // namespace
}  // namespace farcall
