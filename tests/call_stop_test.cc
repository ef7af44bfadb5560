// Stopping calls (CallOptions::stop) and closing a client (Client::Close),
// against a real agent: a stopped call ends CANCELLED at once, wherever it
// is, and the agent lets go of it.
#include <future>
#include <memory>
#include <thread>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "farcall/client.h"
#include "gtest/gtest.h"
#include "tests/process_harness.h"
#include "tests/test_calls.h"

namespace farcall {
namespace {

using ::farcall::testing::ChildProcess;
using ::farcall::testing::HoldsCalls;
using ::farcall::testing::SleepRequest;

std::unique_ptr<ChildProcess> StartAgent() {
  auto a = ChildProcess::Start(FARCALL_AGENT_BIN,
                               {"--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0"});
  EXPECT_TRUE(a.ok()) << a.status();
  return a.ok() ? *std::move(a) : nullptr;
}

// A cpu agent (with its /metrics, for HoldsCalls) and a client of it.
class CallStopTest : public ::testing::Test {
 protected:
  void SetUp() override {
    agent_ = StartAgent();
    ASSERT_TRUE(agent_);
    auto c = Client::Connect(agent_->address());
    ASSERT_TRUE(c.ok()) << c.status();
    client_ = *std::move(c);
  }
  std::unique_ptr<ChildProcess> agent_;
  std::unique_ptr<Client> client_;
};

void ExpectStopped(const absl::StatusOr<CallResult>& r) {
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(r.status().message(), "the caller stopped the call.");
}

TEST_F(CallStopTest, AStoppedAsynchronousCallEndsCancelledAtOnceAndTheAgentLetsGo) {
  CallOptions o;
  o.stop = std::make_shared<CallStop>();
  std::future<absl::StatusOr<CallResult>> f = client_->CallFuture(SleepRequest(30000), o);
  ASSERT_TRUE(HoldsCalls(*agent_, 1));
  const absl::Time stopped_at = absl::Now();
  o.stop->Stop();
  ExpectStopped(f.get());
  EXPECT_LT(absl::Now() - stopped_at, absl::Seconds(2));
  EXPECT_TRUE(HoldsCalls(*agent_, 0));
  // Stopping again changes nothing; the client goes on.
  o.stop->Stop();
  EXPECT_TRUE(o.stop->stopped());
  EXPECT_TRUE(testing::CallOnFour(*client_).ok());
}

TEST_F(CallStopTest, ABlockingCallStoppedFromAnotherThreadEndsCancelled) {
  CallOptions o;
  o.stop = std::make_shared<CallStop>();
  std::thread stopper([&] {
    if (HoldsCalls(*agent_, 1)) o.stop->Stop();
  });
  const absl::Time start = absl::Now();
  absl::StatusOr<CallResult> r = client_->Call(SleepRequest(30000), o);
  stopper.join();
  ExpectStopped(r);
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
}

TEST_F(CallStopTest, ACallGivenAStopThatWasStoppedNeverStarts) {
  CallOptions o;
  o.stop = std::make_shared<CallStop>();
  o.stop->Stop();
  ExpectStopped(client_->Call(SleepRequest(30000), o));
  ExpectStopped(client_->CallFuture(SleepRequest(30000), o).get());
  // One stop, many calls: the others carry their own.
  EXPECT_TRUE(testing::CallOnFour(*client_).ok());
}

TEST_F(CallStopTest, CloseStopsTheCallsInFlightAndRefusesNewOnes) {
  std::future<absl::StatusOr<CallResult>> f = client_->CallFuture(SleepRequest(30000));
  ASSERT_TRUE(HoldsCalls(*agent_, 1));
  client_->Close();
  ExpectStopped(f.get());
  EXPECT_TRUE(HoldsCalls(*agent_, 0));
  for (const absl::StatusOr<CallResult>& r :
       {client_->Call(SleepRequest(1)), client_->CallFuture(SleepRequest(1)).get()}) {
    EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(r.status().message(), "this client is closed.");
  }
  client_->Close();  // again: nothing more
}

// Through a router, with lookaside: Close reaches the call on the agent.
TEST(CallStopLookasideTest, CloseStopsALookasideCall) {
  auto both =
      testing::StartAgentAndRouter(FARCALL_AGENT_BIN, FARCALL_ROUTER_BIN,
                                   {"--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0"});
  ASSERT_TRUE(both.ok()) << both.status();
  auto client = Client::Connect((*both)->router->address());
  ASSERT_TRUE(client.ok());
  std::future<absl::StatusOr<CallResult>> f = (*client)->CallFuture(SleepRequest(30000));
  ASSERT_TRUE(HoldsCalls(*(*both)->agent, 1));
  (*client)->Close();
  ExpectStopped(f.get());
  EXPECT_TRUE(HoldsCalls(*(*both)->agent, 0));
}

}  // namespace
}  // namespace farcall
