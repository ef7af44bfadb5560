#include "server/agent_pool.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "farcall/v1/farcall.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "gtest/gtest.h"

namespace farcall::router {
namespace {

using ::testing::HasSubstr;

// An agent as the pool sees it: the standard health service and Describe,
// in this process, on a loopback port the OS picks.
class FakeAgent final : public v1::Agent::Service {
 public:
  FakeAgent(std::string platform, std::vector<std::string> handlers)
      : platform_(std::move(platform)), handlers_(std::move(handlers)) {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    b.RegisterService(this);
    server_ = b.BuildAndStart();
  }
  ~FakeAgent() override { Stop(); }

  grpc::Status Describe(grpc::ServerContext*, const v1::DescribeRequest*,
                        v1::AgentInfo* info) override {
    ++describes;
    info->set_agent_id(absl::StrCat(platform_, "-fake-", port_));
    info->set_platform(platform_);
    info->set_inflight_calls(inflight);
    for (const std::string& h : handlers_) info->add_handlers()->set_name(h);
    absl::MutexLock l(&mu);
    if (!last_failed_call.empty()) {
      info->set_last_failed_call(last_failed_call);
      info->set_last_failed_call_age_ms(2000);
    }
    return grpc::Status::OK;
  }

  void SetServing(bool serving) { server_->GetHealthCheckService()->SetServingStatus(serving); }
  void Stop() {
    if (server_ != nullptr) server_->Shutdown(std::chrono::system_clock::now());
    server_.reset();
  }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }

  std::atomic<int> describes{0};
  std::atomic<int64_t> inflight{0};  // what Describe reports
  absl::Mutex mu;
  std::string last_failed_call ABSL_GUARDED_BY(mu);  // what Describe reports, 2 s ago

 private:
  const std::string platform_;
  const std::vector<std::string> handlers_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

std::vector<std::string> Addresses(
    const absl::StatusOr<std::vector<std::shared_ptr<AgentHandle>>>& c) {
  std::vector<std::string> out;
  if (c.ok()) {
    for (const auto& h : *c) out.push_back(h->address);
  }
  return out;
}

TEST(AgentPoolTest, CandidatesAreTheLiveAgentsOfThePlatformWithTheHandler) {
  FakeAgent cpu1("cpu", {"copy", "sum"}), cpu2("cpu", {"copy"}), cuda("cuda", {"copy"});
  AgentPool pool({cpu1.address(), cpu2.address(), cuda.address()}, {});
  pool.ProbeAll();
  EXPECT_THAT(Addresses(pool.Candidates(Platform::kCpu, "copy")),
              ::testing::ElementsAre(cpu1.address(), cpu2.address()));
  EXPECT_THAT(Addresses(pool.Candidates(Platform::kCpu, "sum")),
              ::testing::ElementsAre(cpu1.address()));
  EXPECT_THAT(Addresses(pool.Candidates(Platform::kCuda, "copy")),
              ::testing::ElementsAre(cuda.address()));
  // The contract's answers when none may serve it.
  absl::Status missing = pool.Candidates(Platform::kCpu, "softpls").status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(missing.message(),
            "handler 'softpls' is not registered for platform 'cpu'. Registered there: copy, "
            "sum.");
  absl::Status none = pool.Candidates(Platform::kRocm, "copy").status();
  EXPECT_EQ(none.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(none.message(), "no live agent serves platform 'rocm'.");
}

TEST(AgentPoolTest, AnAgentLeavesTheChoiceWhenNotServingDownOrMarkedAndComesBack) {
  FakeAgent a("cpu", {"copy"}), b("cpu", {"copy"});
  AgentPool::Options o;
  o.probe_timeout = absl::Seconds(2);
  AgentPool pool({a.address(), b.address()}, o);
  pool.ProbeAll();
  ASSERT_EQ(Addresses(pool.Candidates(Platform::kCpu, "copy")).size(), 2u);
  const int described = a.describes;

  a.SetServing(false);
  pool.ProbeAll();
  EXPECT_THAT(Addresses(pool.Candidates(Platform::kCpu, "copy")),
              ::testing::ElementsAre(b.address()));
  v1::ListAgentsResponse list = pool.List();
  ASSERT_EQ(list.agents_size(), 2);
  EXPECT_EQ(list.agents(0).health(), v1::AgentEntry::NOT_SERVING);
  EXPECT_EQ(list.agents(0).last_error(), "the agent reports NOT_SERVING");

  a.SetServing(true);
  pool.ProbeAll();
  EXPECT_EQ(Addresses(pool.Candidates(Platform::kCpu, "copy")).size(), 2u);
  EXPECT_GT(a.describes, described);  // described again after it was out

  // A failed call marks it down at once, until the next probe.
  auto first = pool.Candidates(Platform::kCpu, "copy");
  ASSERT_TRUE(first.ok());
  pool.MarkDown(*(*first)[0], "connection refused");
  EXPECT_THAT(Addresses(pool.Candidates(Platform::kCpu, "copy")),
              ::testing::ElementsAre(b.address()));
  EXPECT_EQ(pool.List().agents(0).last_error(), "connection refused");
  pool.ProbeAll();
  EXPECT_EQ(Addresses(pool.Candidates(Platform::kCpu, "copy")).size(), 2u);

  b.Stop();
  pool.ProbeAll();
  EXPECT_THAT(Addresses(pool.Candidates(Platform::kCpu, "copy")),
              ::testing::ElementsAre(a.address()));
  list = pool.List();
  EXPECT_EQ(list.agents(1).health(), v1::AgentEntry::DOWN);
  EXPECT_THAT(list.agents(1).last_error(), HasSubstr("health check failed"));
}

TEST(AgentPoolTest, AnAgentsLoadIsWhatItReportsOrWhatTheRouterSendsIfMore) {
  FakeAgent a("cpu", {"copy"});
  AgentPool pool({a.address()}, {});
  a.inflight = 5;
  pool.ProbeAll();
  auto c = pool.Candidates(Platform::kCpu, "copy");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ((*c)[0]->load(), 5);  // read on every probe, not only the first
  (*c)[0]->inflight = 7;
  EXPECT_EQ((*c)[0]->load(), 7);
  (*c)[0]->inflight = 0;
  a.inflight = 0;
  pool.ProbeAll();
  EXPECT_EQ((*c)[0]->load(), 0);
}

TEST(AgentPoolTest, StatusCountsCallsAndErrorsPerAgent) {
  FakeAgent a("cpu", {"copy"});
  AgentPool pool({a.address()}, {});
  pool.ProbeAll();
  auto c = pool.Candidates(Platform::kCpu, "copy");
  ASSERT_TRUE(c.ok());
  (*c)[0]->calls_total += 3;
  (*c)[0]->RecordError("INTERNAL: boom");
  std::vector<AgentStatus> status = pool.Status();
  ASSERT_EQ(status.size(), 1u);
  EXPECT_EQ(status[0].health, "SERVING");
  EXPECT_EQ(status[0].platform, "cpu");
  EXPECT_EQ(status[0].calls_total, 3u);
  EXPECT_EQ(status[0].errors_total, 1u);
  EXPECT_EQ(status[0].last_call_error, "INTERNAL: boom");
  EXPECT_THAT(status[0].handlers, ::testing::ElementsAre("copy"));
}

// With lookaside, calls that fail on an agent never pass the router: the
// page shows the agent's own last failure (from its Describe), when later
// than the last one routed there.
TEST(AgentPoolTest, StatusShowsTheAgentsOwnLastFailure) {
  FakeAgent a("cpu", {"copy"});
  AgentPool pool({a.address()}, {});
  pool.ProbeAll();
  EXPECT_EQ(pool.Status()[0].last_call_error, "");
  {
    absl::MutexLock l(&a.mu);
    a.last_failed_call = "NOT_FOUND: handler 'nope' is not registered for platform 'cpu'.";
  }
  pool.ProbeAll();
  std::vector<AgentStatus> status = pool.Status();
  EXPECT_EQ(status[0].last_call_error,
            "NOT_FOUND: handler 'nope' is not registered for platform 'cpu'.");
  EXPECT_LT(status[0].last_call_error_time, absl::Now() - absl::Seconds(1));
  // A failure routed here since then is the later one.
  auto c = pool.Candidates(Platform::kCpu, "copy");
  ASSERT_TRUE(c.ok());
  (*c)[0]->RecordError("INTERNAL: boom");
  EXPECT_EQ(pool.Status()[0].last_call_error, "INTERNAL: boom");
}

}  // namespace
}  // namespace farcall::router
