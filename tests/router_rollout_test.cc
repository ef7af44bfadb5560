// Router rollouts without client errors: two routers in front of an agent,
// clients given both addresses (as a headless Service or a DNS name with
// both gives them), each router replaced in turn under load. A draining
// router refuses new calls for a second, then sends GOAWAY; clients send
// refused calls again and reconnect to the other router; calls in flight
// finish. No call fails, and none ends CANCELLED because a server went
// away.
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "farcall/client.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/process_harness.h"
#include "tests/test_calls.h"

namespace farcall {
namespace {

using ::farcall::testing::ChildProcess;

std::unique_ptr<ChildProcess> StartRouter(const std::string& listen, const std::string& agent) {
  auto r = ChildProcess::Start(FARCALL_ROUTER_BIN,
                               {"--listen=" + listen, "--agents=" + agent,
                                "--metrics_listen=127.0.0.1:0", "--drain_seconds=10"});
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *std::move(r) : nullptr;
}

// Calls from several clients until stopped: through the routers, by
// lookaside (the router names the agent), and asynchronously.
class Load {
 public:
  explicit Load(const std::string& target) {
    for (int i = 0; i < 3; ++i) {
      threads_.emplace_back([this, target, i] {
        auto client = Client::Connect(target);
        ASSERT_TRUE(client.ok()) << client.status();
        CallOptions o;
        o.timeout = absl::Seconds(30);
        o.via_router = i != 1;  // thread 1 calls the agent the router names
        while (!stop_) {
          absl::StatusOr<CallResult> r;
          if (i == 2) {
            std::vector<float> x = {1, 2, 3, 4};
            r = (*client)->CallFuture(testing::RequestOnFour("copy", x), o).get();
          } else {
            r = testing::CallOnFour(**client, "copy", o);
          }
          ++calls_;
          if (!r.ok()) {
            absl::MutexLock l(&mu_);
            ++failures_[r.status().ToString()];
          }
        }
      });
    }
  }
  ~Load() { Stop(); }
  // Returns once `n` more calls have ended.
  void AwaitMore(int n) {
    const int target = calls_ + n;
    const absl::Time give_up = absl::Now() + absl::Seconds(60);
    while (calls_ < target && absl::Now() < give_up) std::this_thread::yield();
    ASSERT_GE(calls_.load(), target) << "the load made no progress";
  }
  void Stop() {
    stop_ = true;
    for (std::thread& t : threads_) t.join();
    threads_.clear();
  }
  int calls() const { return calls_; }
  std::map<std::string, int> failures() {
    absl::MutexLock l(&mu_);
    return failures_;
  }

 private:
  std::vector<std::thread> threads_;
  std::atomic<bool> stop_{false};
  std::atomic<int> calls_{0};
  absl::Mutex mu_;
  std::map<std::string, int> failures_ ABSL_GUARDED_BY(mu_);
};

TEST(RouterRolloutTest, ReplacingEachRouterInTurnFailsNoCall) {
  auto agent = ChildProcess::Start(FARCALL_AGENT_BIN, {"--listen=127.0.0.1:0"});
  ASSERT_TRUE(agent.ok()) << agent.status();
  std::unique_ptr<ChildProcess> routers[2] = {StartRouter("127.0.0.1:0", (*agent)->address()),
                                              StartRouter("127.0.0.1:0", (*agent)->address())};
  ASSERT_NE(routers[0], nullptr);
  ASSERT_NE(routers[1], nullptr);
  const std::string target =
      absl::StrCat("ipv4:", routers[0]->address(), ",", routers[1]->address());

  // A call in flight on the first router while it drains finishes (a
  // client of that router alone, so that the call is there).
  const int first = 0;
  auto client = Client::Connect(routers[first]->address());
  ASSERT_TRUE(client.ok());
  CallRequest sleep;
  sleep.platform = "cpu";
  sleep.handler = "sleep";
  // Longer than the clients send refused calls again (3.1 s): only
  // GOAWAY moves them off this router before its drain ends.
  sleep.attributes["ms"] = int64_t{6000};
  CallOptions long_call;
  long_call.timeout = absl::Seconds(30);
  long_call.via_router = true;
  const absl::Time sleep_started = absl::Now();
  auto in_flight = (*client)->CallFuture(sleep, long_call);
  const std::string held =
      absl::StrCat("farcall_router_agent_inflight_calls{agent=\"", (*agent)->address(), "\"}");
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (testing::MetricValue(testing::HttpGet(routers[first]->metrics_port(), "/metrics"), held) <
             1 &&
         absl::Now() < give_up) {
  }
  Load load(target);
  load.AwaitMore(200);

  absl::Duration stopped[2];
  absl::Time first_stopped;
  for (int i : {first, 1 - first}) {
    const int port = routers[i]->port();
    const absl::Time start = absl::Now();
    EXPECT_EQ(routers[i]->Terminate(), 0);
    stopped[i] = absl::Now() - start;
    if (i == first) first_stopped = absl::Now();
    load.AwaitMore(200);
    // Its replacement, on its address (a new pod behind the same name).
    routers[i] = StartRouter(absl::StrCat("127.0.0.1:", port), (*agent)->address());
    ASSERT_NE(routers[i], nullptr);
    load.AwaitMore(200);
  }
  load.Stop();

  absl::StatusOr<CallResult> slept = in_flight.get();
  EXPECT_TRUE(slept.ok()) << slept.status();
  // Its drain lasted until the 6 s call ended.
  EXPECT_GE(first_stopped - sleep_started, absl::Milliseconds(5500))
      << "the call in flight did not hold the drain";
  std::string failed;
  int failures = 0;
  for (const auto& [status, n] : load.failures()) {
    failures += n;
    absl::StrAppend(&failed, "\n  ", n, " x ", status);
  }
  EXPECT_EQ(failures, 0) << "of " << load.calls() << " calls:" << failed;
  std::printf("router rollout: %d calls, %d failed; the routers stopped after %s and %s\n",
              load.calls(), failures, absl::FormatDuration(stopped[first]).c_str(),
              absl::FormatDuration(stopped[1 - first]).c_str());
}

TEST(RouterRolloutTest, ACallCutShortByARoutersShutdownIsUnavailableNotCancelled) {
  auto agent = ChildProcess::Start(FARCALL_AGENT_BIN,
                                   {"--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0"});
  ASSERT_TRUE(agent.ok()) << agent.status();
  auto router = ChildProcess::Start(
      FARCALL_ROUTER_BIN,
      {"--listen=127.0.0.1:0", "--agents=" + (*agent)->address(), "--drain_seconds=1"});
  ASSERT_TRUE(router.ok()) << router.status();
  auto client = Client::Connect((*router)->address());
  ASSERT_TRUE(client.ok());
  CallRequest sleep;
  sleep.platform = "cpu";
  sleep.handler = "sleep";
  sleep.attributes["ms"] = int64_t{20000};
  sleep.has_side_effect = true;  // never sent again: the answer is this call's
  CallOptions o;
  o.timeout = absl::Seconds(60);
  o.via_router = true;
  auto call = (*client)->CallFuture(sleep, o);
  // Wait until the agent holds it, then stop the router: its 1 s drain
  // runs out and gRPC cancels the call.
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (testing::MetricValue(testing::HttpGet((*agent)->metrics_port(), "/metrics"),
                              "farcall_agent_inflight_calls") < 1 &&
         absl::Now() < give_up) {
  }
  EXPECT_EQ((*router)->Terminate(), 0);
  absl::StatusOr<CallResult> r = call.get();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();
  std::printf("cut short: %s\n", r.status().ToString().c_str());
}

// A router that ends every call with CANCELLED, as one that goes away may
// (it answers Describe as a router does: UNIMPLEMENTED).
class CancelsEverything : public grpc::CallbackGenericService {
  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext* ctx) override {
    class Reactor : public grpc::ServerGenericBidiReactor {
     public:
      explicit Reactor(bool describe) {
        Finish(describe ? grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "no Describe")
                        : grpc::Status::CANCELLED);
      }
      void OnDone() override { delete this; }
    };
    const std::string& m = ctx->method();
    return new Reactor(m.size() >= 9 && m.compare(m.size() - 9, 9, "/Describe") == 0);
  }
};

TEST(RouterRolloutTest, CancelledFromAServerIsUnavailableToACallerThatDidNotCancel) {
  CancelsEverything service;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterCallbackGenericService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  auto client = Client::Connect(absl::StrCat("127.0.0.1:", port));
  ASSERT_TRUE(client.ok());
  for (bool async : {false, true}) {
    CallOptions o;
    o.timeout = absl::Seconds(10);
    o.via_router = true;  // the router's Execute, which it cancels
    std::vector<float> x = {1, 2, 3, 4};
    absl::StatusOr<CallResult> r =
        async ? (*client)->CallFuture(testing::RequestOnFour("copy", x), o).get()
              : (*client)->Call(testing::RequestOnFour("copy", x), o);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();
    EXPECT_EQ(r.status().message(),
              "the server ended the call before it answered (it shut down or went away); the "
              "call may have run.");
  }
  server->Shutdown();
}

}  // namespace
}  // namespace farcall
