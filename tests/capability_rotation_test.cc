// Rotating the capability signing key under load, in the runbook's order
// (docs/security.md, "Rotating capability keys"), fails no call:
//   1. the agents trust the new public key beside the old (reloaded);
//   2. the router signs with the new private key (reloaded);
//   3. the agents drop the old public key (reloaded).
// Callers go straight to agents on capabilities (lookaside) and through the
// router at once, on two agents, the whole time. A capability an agent no
// longer trusts sends that call through the router, which mints a fresh one.
#include <signal.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/capability.h"
#include "farcall/client.h"
#include "farcall/v1/farcall.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/process_harness.h"
#include "tests/test_calls.h"

namespace farcall {
namespace {

using ::farcall::testing::CallOnFour;
using ::farcall::testing::ChildProcess;

constexpr char kCaller[] = "caller-token-0123456789";

std::unique_ptr<ChildProcess> Start(const std::string& binary, std::vector<std::string> args) {
  args.insert(args.begin(), "--listen=127.0.0.1:0");
  auto p = ChildProcess::Start(binary, args);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? *std::move(p) : nullptr;
}

// Calls from several threads until stopped, counting what failed.
class Load {
 public:
  Load(const std::string& router, int threads) {
    for (int t = 0; t < threads; ++t) {
      threads_.emplace_back([this, router, t] {
        ClientOptions o;
        o.token = kCaller;
        auto c = Client::Connect(router, o);
        if (!c.ok()) return Failed(c.status());
        CallOptions call;
        call.via_router = t == 0;  // one thread through the router, the rest direct
        call.timeout = absl::Seconds(20);
        while (!stop_) {
          absl::StatusOr<CallResult> r = CallOnFour(**c, "copy", call);
          if (!r.ok()) Failed(r.status());
          absl::MutexLock l(&mu_);
          ++calls_;
          if (r.ok() && !r->via_router) ++direct_;
        }
      });
    }
  }
  ~Load() { Stop(); }
  void Stop() {
    stop_ = true;
    for (std::thread& t : threads_) {
      if (t.joinable()) t.join();
    }
  }
  // Waits (bounded) until `n` more calls ended.
  bool Another(int64_t n) {
    absl::MutexLock l(&mu_);
    const int64_t target = calls_ + n;
    auto done = [this, target]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return calls_ >= target; };
    return mu_.AwaitWithTimeout(absl::Condition(&done), absl::Seconds(60));
  }
  int64_t calls() {
    absl::MutexLock l(&mu_);
    return calls_;
  }
  int64_t direct() {
    absl::MutexLock l(&mu_);
    return direct_;
  }
  int64_t failures() const { return failures_; }
  std::string first_failure() {
    absl::MutexLock l(&mu_);
    return first_failure_;
  }

 private:
  void Failed(const absl::Status& s) {
    ++failures_;
    absl::MutexLock l(&mu_);
    if (first_failure_.empty()) first_failure_ = s.ToString();
  }
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> failures_{0};
  absl::Mutex mu_;
  int64_t calls_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t direct_ ABSL_GUARDED_BY(mu_) = 0;
  std::string first_failure_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_;
};

class RotationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir_template[] = "/tmp/farcall-rotation-XXXXXX";
    dir_ = mkdtemp(dir_template);
    old_pem_ = NewCapabilitySigningKeyPem();
    new_pem_ = NewCapabilitySigningKeyPem();
    old_pub_ = CapabilitySigner::FromPem(old_pem_, "old").value().public_key_pem();
    new_pub_ = CapabilitySigner::FromPem(new_pem_, "new").value().public_key_pem();
    Write("router.pem", old_pem_);
    Write("agents.pem", old_pub_);
    Write("router-tokens", absl::StrCat(kCaller, " *\n"));
    Write("router-token", "router-token-0123456789\n");
    Write("agent-tokens", "router-token-0123456789 *\n");
  }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }

  void Write(const std::string& name, const std::string& text) {
    // Replaced whole, as a Secret's files are: never read half-written.
    std::ofstream(dir_ + "/" + name + ".tmp") << text;
    ASSERT_EQ(std::rename((dir_ + "/" + name + ".tmp").c_str(), (dir_ + "/" + name).c_str()), 0);
  }

  // Whether the agent takes a capability signed with `pem` (Describe):
  // true, false when it refuses the key, nothing when the answer says
  // neither (a deadline, say).
  static std::optional<bool> Trusts(const ChildProcess& agent, const std::string& agent_id,
                                    const std::string& pem) {
    CapabilitySigner s = CapabilitySigner::FromPem(pem, "test").value();
    auto channel = grpc::CreateChannel(agent.address(), grpc::InsecureChannelCredentials());
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    ctx.AddMetadata(kCapabilityMetadataKey, s.Mint({"token:aaaaaaaaaaaa", "copy", agent_id,
                                                    absl::Now() + absl::Minutes(1)}));
    v1::AgentInfo info;
    const grpc::Status st = v1::Agent::NewStub(channel)->Describe(&ctx, {}, &info);
    if (st.ok()) return true;
    if (st.error_code() == grpc::StatusCode::UNAUTHENTICATED &&
        absl::StrContains(st.error_message(), "signed by a key this agent does not trust")) {
      return false;
    }
    return std::nullopt;
  }
  // Waits (bounded) until the agent's trust of `pem` is `trusted`.
  static bool UntilTrust(const ChildProcess& agent, const std::string& agent_id,
                         const std::string& pem, bool trusted) {
    const absl::Time end = absl::Now() + absl::Seconds(20);
    while (absl::Now() < end) {
      if (Trusts(agent, agent_id, pem) == trusted) return true;
    }
    return false;
  }
  // Waits (bounded) until the router's capabilities verify with `pub`.
  static bool UntilRouterSignsWith(const ChildProcess& router, const std::string& pub) {
    CapabilityVerifier v = CapabilityVerifier::FromPem(pub, "test").value();
    auto channel = grpc::CreateChannel(router.address(), grpc::InsecureChannelCredentials());
    const absl::Time end = absl::Now() + absl::Seconds(20);
    while (absl::Now() < end) {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
      ctx.AddMetadata("authorization", absl::StrCat("Bearer ", kCaller));
      v1::ResolveRequest req;
      req.set_platform("cpu");
      req.set_handler("copy");
      v1::ResolveResponse resp;
      if (v1::Router::NewStub(channel)->Resolve(&ctx, req, &resp).ok() && resp.agents_size() > 0 &&
          v.Verify(resp.agents(0).capability(), absl::Now()).ok()) {
        return true;
      }
    }
    return false;
  }

  std::string dir_, old_pem_, new_pem_, old_pub_, new_pub_;
};

TEST_F(RotationTest, TheRunbooksOrderFailsNoCallUnderLoad) {
  std::vector<std::unique_ptr<ChildProcess>> agents;
  std::vector<std::string> ids;
  for (int i = 0; i < 2; ++i) {
    agents.push_back(
        Start(FARCALL_AGENT_BIN, {"--tokens_file=" + dir_ + "/agent-tokens",
                                  "--capability_verify_keys_file=" + dir_ + "/agents.pem"}));
    ASSERT_TRUE(agents.back());
    ClientOptions o;
    o.token = "router-token-0123456789";
    auto c = Client::Connect(agents.back()->address(), o);
    ASSERT_TRUE(c.ok());
    absl::StatusOr<AgentDescription> d = (*c)->Describe();
    ASSERT_TRUE(d.ok()) << d.status();
    ids.push_back(d->agent_id);
  }
  auto router =
      Start(FARCALL_ROUTER_BIN, {"--agents=" + agents[0]->address() + "," + agents[1]->address(),
                                 "--tokens_file=" + dir_ + "/router-tokens",
                                 "--agent_token_file=" + dir_ + "/router-token",
                                 "--capability_signing_key_file=" + dir_ + "/router.pem"});
  ASSERT_TRUE(router);

  Load load(router->address(), 4);
  ASSERT_TRUE(load.Another(200));

  // 1. Agents trust old and new. (The first agent finds the change itself;
  // the second is told by SIGHUP, as an operator may.)
  Write("agents.pem", old_pub_ + new_pub_);
  agents[1]->Signal(SIGHUP);
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(UntilTrust(*agents[i], ids[i], new_pem_, true)) << i;
  ASSERT_TRUE(load.Another(200));

  // 2. The router signs with the new key.
  Write("router.pem", new_pem_);
  router->Signal(SIGHUP);
  ASSERT_TRUE(UntilRouterSignsWith(*router, new_pub_));
  ASSERT_TRUE(load.Another(200));

  // 3. Agents drop the old key. Capabilities clients still hold from before
  // step 2 are refused now; those calls go through the router.
  Write("agents.pem", new_pub_);
  for (int i = 0; i < 2; ++i) {
    agents[i]->Signal(SIGHUP);
    ASSERT_TRUE(UntilTrust(*agents[i], ids[i], old_pem_, false)) << i;
  }
  ASSERT_TRUE(load.Another(400));
  load.Stop();

  EXPECT_EQ(load.failures(), 0) << load.first_failure();
  EXPECT_GE(load.calls(), 1000);
  EXPECT_GT(load.direct(), 0) << "no call went straight to an agent";
  // After the rotation, calls still go straight to agents, on new keys.
  ClientOptions o;
  o.token = kCaller;
  auto c = Client::Connect(router->address(), o);
  ASSERT_TRUE(c.ok());
  int direct = 0;
  for (int i = 0; i < 20; ++i) {
    absl::StatusOr<CallResult> r = CallOnFour(**c);
    ASSERT_TRUE(r.ok()) << r.status();
    direct += !r->via_router;
  }
  EXPECT_GT(direct, 0);
}

// The failure the runbook avoids: the router switched before the agents
// trust its new key. Every agent refuses its capabilities (the alert's
// series counts them), and the calls fail UNAUTHENTICATED.
TEST_F(RotationTest, SwitchingTheRouterFirstIsRefusedAndCounted) {
  auto agent = Start(FARCALL_AGENT_BIN,
                     {"--tokens_file=" + dir_ + "/agent-tokens", "--metrics_listen=127.0.0.1:0",
                      "--capability_verify_keys_file=" + dir_ + "/agents.pem"});
  ASSERT_TRUE(agent);
  auto router = Start(FARCALL_ROUTER_BIN,
                      {"--agents=" + agent->address(), "--tokens_file=" + dir_ + "/router-tokens",
                       "--agent_token_file=" + dir_ + "/router-token",
                       "--capability_signing_key_file=" + dir_ + "/router.pem"});
  ASSERT_TRUE(router);
  Write("router.pem", new_pem_);
  router->Signal(SIGHUP);
  ASSERT_TRUE(UntilRouterSignsWith(*router, new_pub_));
  ClientOptions o;
  o.token = kCaller;
  auto c = Client::Connect(router->address(), o);
  ASSERT_TRUE(c.ok());
  absl::Status s = CallOnFour(**c).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << s;
  EXPECT_THAT(s.message(), ::testing::HasSubstr("was signed by a key this agent does not trust"));
  EXPECT_GE(testing::MetricValue(testing::HttpGet(agent->metrics_port(), "/metrics"),
                                 "farcall_agent_capability_checks_total{result=\"unknown_key\"}"),
            1);
}

}  // namespace
}  // namespace farcall
