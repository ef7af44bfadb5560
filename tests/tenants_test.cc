// Tenants on one agent: the quotas a tokens file and the flags set, fair
// sharing of the workers between tenants (the noisy neighbour), and the
// `tenant` label of the agent's metrics, bounded. The byte budget's fair
// queuing is device_agents/admission_test.cc's; the slow drip across
// tenants is stalled_client_test.cc's.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "core/tokens.h"
#include "farcall/client.h"
#include "gmock/gmock.h"
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
using ::testing::HasSubstr;
using ::testing::Not;

// A tokens file with `text` in a fresh temporary directory; its path.
std::string TokensFile(const std::string& text) {
  char dir[] = "/tmp/farcall-tenants-XXXXXX";
  if (mkdtemp(dir) == nullptr) return "";
  const std::string path = std::string(dir) + "/tokens";
  std::ofstream(path) << text;
  return path;
}

std::unique_ptr<ChildProcess> StartAgent(const std::string& tokens,
                                         std::vector<std::string> flags = {}) {
  flags.insert(flags.end(), {"--platform=cpu", "--listen=127.0.0.1:0",
                             "--metrics_listen=127.0.0.1:0", "--tokens_file=" + tokens});
  auto a = ChildProcess::Start(FARCALL_AGENT_BIN, flags);
  EXPECT_TRUE(a.ok()) << a.status();
  return a.ok() ? *std::move(a) : nullptr;
}

std::unique_ptr<Client> ConnectAs(const ChildProcess& agent, const std::string& token) {
  ClientOptions o;
  o.token = token;
  auto c = Client::Connect(agent.address(), o);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *std::move(c) : nullptr;
}

// A copy of `n` floats.
absl::StatusOr<CallResult> Copy(Client& client, int64_t n) {
  std::vector<float> x(n, 1.5f);
  CallRequest req;
  req.platform = "cpu";
  req.handler = "copy";
  req.args = {Arg::In(TensorSpec{DType::kF32, {n}}, x.data())};
  req.results = {TensorSpec{DType::kF32, {n}}};
  CallOptions o;
  o.transport = Transport::kGrpc;
  return client.Call(req, o);
}

// Two tokens of one team are one tenant: they share its max_calls, and
// the refusal names the tokens-file line; another tenant is not touched.
TEST(TenantsTest, TokensOfOneTenantShareItsQuotaOfCalls) {
  const std::string tokens = TokensFile(
      "team-a-token-one-0123 * tenant=team-a max_calls=1\n"
      "team-a-token-two-0123 * tenant=team-a max_calls=1\n"
      "other-token-0123456789 *\n");
  auto agent = StartAgent(tokens);
  ASSERT_NE(agent, nullptr);
  auto one = ConnectAs(*agent, "team-a-token-one-0123");
  auto two = ConnectAs(*agent, "team-a-token-two-0123");
  auto other = ConnectAs(*agent, "other-token-0123456789");
  ASSERT_TRUE(one && two && other);
  auto held = one->CallFuture(SleepRequest(3000));
  ASSERT_TRUE(HoldsCalls(*agent, 1));
  absl::StatusOr<CallResult> refused = two->Call(SleepRequest(1));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
  EXPECT_EQ(refused.status().message(),
            "this caller has 1 calls in flight on this agent, its most (max_calls=1 on its "
            "tokens-file line); retry when one ends.");
  EXPECT_TRUE(Copy(*other, 16).ok());
  EXPECT_TRUE(held.get().ok());
  EXPECT_TRUE(two->Call(SleepRequest(1)).ok()) << "the team's slot came back";
  const std::string page = HttpGet(agent->metrics_port(), "/metrics");
  EXPECT_THAT(page, HasSubstr("farcall_agent_refused_calls_total{reason=\"limit\","
                              "tenant=\"tenant:team-a\"} 1"));
  EXPECT_THAT(page, Not(HasSubstr("team-a-token")));
}

// --tenant_max_bytes: a call that could never fit its tenant's quota is
// refused naming it; a line's max_bytes overrides the flag.
TEST(TenantsTest, ACallOverItsTenantsQuotaOfBytesIsRefused) {
  const std::string tokens = TokensFile(
      "small-token-0123456789 * tenant=small\n"
      "large-token-0123456789 * tenant=large max_bytes=1000000\n");
  auto agent = StartAgent(tokens, {"--tenant_max_bytes=100000"});
  ASSERT_NE(agent, nullptr);
  auto small = ConnectAs(*agent, "small-token-0123456789");
  auto large = ConnectAs(*agent, "large-token-0123456789");
  ASSERT_TRUE(small && large);
  EXPECT_TRUE(Copy(*small, 1024).ok());
  absl::StatusOr<CallResult> refused = Copy(*small, 65536);  // 512 KiB of tensors
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
  EXPECT_THAT(refused.status().message(),
              HasSubstr("bytes, over this caller's quota of 100000 bytes in flight "
                        "(--tenant_max_bytes); it can never run here."));
  EXPECT_TRUE(Copy(*large, 65536).ok());
  refused = Copy(*large, 262144);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
  EXPECT_THAT(refused.status().message(),
              HasSubstr("over this caller's quota of 1000000 bytes in flight (max_bytes on its "
                        "tokens-file line)"));
}

// The values of `label` on the series of `family` in a metrics page.
std::vector<std::string> LabelValues(const std::string& page, const std::string& family,
                                     const std::string& label) {
  std::vector<std::string> out;
  for (absl::string_view line : absl::StrSplit(page, '\n')) {
    if (!absl::StartsWith(line, family + "{")) continue;
    const size_t at = line.find(label + "=\"");
    if (at == absl::string_view::npos) continue;
    absl::string_view rest = line.substr(at + label.size() + 2);
    std::string v(rest.substr(0, rest.find('"')));
    if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Metrics label calls with their tenant, never a token; past
// --metrics_max_tenants tenants share the value `other`.
TEST(TenantsTest, MetricsLabelTenantsWithinTheCap) {
  std::string text;
  for (int i = 0; i < 4; ++i) {
    absl::StrAppend(&text, "tenant-token-", i, "-0123456789 * tenant=t", i, "\n");
  }
  auto agent = StartAgent(TokensFile(text), {"--metrics_max_tenants=2"});
  ASSERT_NE(agent, nullptr);
  for (int i = 0; i < 4; ++i) {
    auto c = ConnectAs(*agent, absl::StrCat("tenant-token-", i, "-0123456789"));
    ASSERT_NE(c, nullptr);
    ASSERT_TRUE(Copy(*c, 16).ok());
  }
  const std::string page = HttpGet(agent->metrics_port(), "/metrics");
  EXPECT_EQ(LabelValues(page, "farcall_agent_calls_total", "tenant"),
            (std::vector<std::string>{"other", "tenant:t0", "tenant:t1"}));
  EXPECT_EQ(MetricValue(page,
                        "farcall_agent_calls_total{code=\"OK\",handler=\"copy\","
                        "platform=\"cpu\",tenant=\"other\"}"),
            2);
  EXPECT_EQ(MetricValue(page,
                        "farcall_agent_received_bytes_total{platform=\"cpu\","
                        "tenant=\"tenant:t0\"}"),
            64);
  EXPECT_GT(MetricValue(page,
                        "farcall_agent_admission_seconds_count{platform=\"cpu\","
                        "tenant=\"tenant:t1\"}"),
            0);
  EXPECT_THAT(page, Not(HasSubstr("tenant-token")));
}

// A router holds a tenant to its max_calls for the calls it forwards, and
// labels its own metrics with the tenant.
TEST(TenantsTest, ARouterHoldsATenantToItsQuotaOfCalls) {
  auto agent = ChildProcess::Start(FARCALL_AGENT_BIN, {"--platform=cpu", "--listen=127.0.0.1:0"});
  ASSERT_TRUE(agent.ok()) << agent.status();
  const std::string tokens = TokensFile(
      "team-a-token-one-0123 * tenant=team-a max_calls=1\n"
      "team-a-token-two-0123 * tenant=team-a max_calls=1\n"
      "other-token-0123456789 *\n");
  auto router = ChildProcess::Start(FARCALL_ROUTER_BIN,
                                    {"--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0",
                                     "--agents=" + (*agent)->address(), "--tokens_file=" + tokens});
  ASSERT_TRUE(router.ok()) << router.status();
  auto one = ConnectAs(**router, "team-a-token-one-0123");
  auto two = ConnectAs(**router, "team-a-token-two-0123");
  auto other = ConnectAs(**router, "other-token-0123456789");
  ASSERT_TRUE(one && two && other);
  CallOptions via;
  via.via_router = true;
  auto held = one->CallFuture(SleepRequest(3000), via);
  // Once the router has the call on the agent (bounded: 20 s).
  const std::string inflight =
      absl::StrCat("farcall_router_agent_inflight_calls{agent=\"", (*agent)->address(), "\"}");
  bool holding = false;
  for (const absl::Time end = absl::Now() + absl::Seconds(20); !holding && absl::Now() < end;) {
    holding = MetricValue(HttpGet((*router)->metrics_port(), "/metrics"), inflight) == 1;
  }
  ASSERT_TRUE(holding) << "the router never held the call";
  absl::StatusOr<CallResult> refused = two->Call(SleepRequest(1), via);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
  EXPECT_EQ(refused.status().message(),
            "this caller has 1 calls in flight through this router, its most (max_calls=1 on "
            "its tokens-file line); retry when one ends.");
  EXPECT_TRUE(other->Call(SleepRequest(1), via).ok());
  EXPECT_TRUE(held.get().ok());
  EXPECT_TRUE(two->Call(SleepRequest(1), via).ok()) << "the team's slot came back";
  const std::string page = HttpGet((*router)->metrics_port(), "/metrics");
  EXPECT_THAT(page, HasSubstr("farcall_router_refused_calls_total{reason=\"limit\","
                              "tenant=\"tenant:team-a\"} 1"));
  EXPECT_EQ(
      LabelValues(page, "farcall_router_calls_total", "tenant"),
      (std::vector<std::string>{"tenant:team-a", PrincipalOfToken("other-token-0123456789")}));
}

// B's copies, timed one by one: their median, and calls per second.
struct Copies {
  absl::Duration p50;
  double per_second = 0;
};
Copies CopiesOf(Client& b, int calls) {
  std::vector<absl::Duration> took;
  const absl::Time start = absl::Now();
  for (int i = 0; i < calls; ++i) {
    const absl::Time t = absl::Now();
    absl::StatusOr<CallResult> r = Copy(b, 65536);  // 256 KiB
    EXPECT_TRUE(r.ok()) << r.status();
    took.push_back(absl::Now() - t);
  }
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  std::sort(took.begin(), took.end());
  return {took[took.size() / 2], calls / seconds};
}

double Sample(const std::string& page, const std::string& series) {
  return std::max(MetricValue(page, series), 0.0);
}

// The noisy neighbour: tenant C keeps 8 slow calls (2 s each) in flight
// on an agent with 2 workers while tenant B sends 256 KiB copies. B's
// calls do not queue behind C's: its median stays within 2x of what it is
// alone (plus 2 ms for a noisy machine), its throughput within 0.5x, and
// the agent's own queue-time histogram shows B's calls waited no more
// than 100 ms on average for a worker. C is not starved either: its calls
// go on ending.
TEST(TenantsTest, ANoisyNeighboursSlowCallsDoNotStallAnotherTenant) {
  auto agent = StartAgent(TokensFile("tenant-b-token-0123456789 * tenant=b\n"
                                     "tenant-c-token-0123456789 * tenant=c\n"),
                          {"--workers=2"});
  ASSERT_NE(agent, nullptr);
  auto b = ConnectAs(*agent, "tenant-b-token-0123456789");
  auto c = ConnectAs(*agent, "tenant-c-token-0123456789");
  ASSERT_TRUE(b && c);
  constexpr int kCalls = 200;
  const Copies alone = CopiesOf(*b, kCalls);

  std::atomic<bool> stop{false};
  std::atomic<int> c_ended{0};
  std::vector<std::thread> noisy;
  for (int i = 0; i < 8; ++i) {
    noisy.emplace_back([&] {
      while (!stop.load()) {
        if (c->Call(SleepRequest(2000)).ok()) ++c_ended;
      }
    });
  }
  ASSERT_TRUE(HoldsCalls(*agent, 8)) << "C never held 8 calls";
  const std::string before = HttpGet(agent->metrics_port(), "/metrics");
  const Copies loaded = CopiesOf(*b, kCalls);
  const std::string after = HttpGet(agent->metrics_port(), "/metrics");
  stop = true;
  for (auto& t : noisy) t.join();

  const std::string b_queue = "{handler=\"copy\",platform=\"cpu\",tenant=\"tenant:b\"}";
  const double queued_s = Sample(after, "farcall_agent_queue_seconds_sum" + b_queue) -
                          Sample(before, "farcall_agent_queue_seconds_sum" + b_queue);
  const double queued_n = Sample(after, "farcall_agent_queue_seconds_count" + b_queue) -
                          Sample(before, "farcall_agent_queue_seconds_count" + b_queue);
  std::printf(
      "B alone: p50 %s, %.0f calls/s; beside C: p50 %s, %.0f calls/s (p50 ratio %.2f, "
      "throughput ratio %.2f); B's mean wait for a worker beside C: %.2f ms; C's calls "
      "ended: %d\n",
      absl::FormatDuration(alone.p50).c_str(), alone.per_second,
      absl::FormatDuration(loaded.p50).c_str(), loaded.per_second,
      absl::FDivDuration(loaded.p50, alone.p50), loaded.per_second / alone.per_second,
      queued_n > 0 ? 1000 * queued_s / queued_n : -1.0, c_ended.load());
  EXPECT_LE(loaded.p50, 2 * alone.p50 + absl::Milliseconds(2));
  EXPECT_GE(loaded.per_second, 0.5 * alone.per_second);
  ASSERT_EQ(queued_n, kCalls);
  EXPECT_LT(queued_s / queued_n, 0.1);
  EXPECT_GE(c_ended.load(), 8) << "C's calls must go on ending";
}

}  // namespace
}  // namespace farcall

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
