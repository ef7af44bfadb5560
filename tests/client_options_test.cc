// Client options against real processes.
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "farcall/client.h"
#include "gtest/gtest.h"
#include "tests/process_harness.h"
#include "tests/test_calls.h"
#include "tests/test_platform.h"

namespace farcall {
namespace {

using ::farcall::testing::AgentArgs;
using ::farcall::testing::CallOnFour;
using ::farcall::testing::ChildProcess;
using ::farcall::testing::SleepRequest;
using ::farcall::testing::TestPlatform;

// ---- Client options ------------------------------------------------------------

TEST(ClientOptionsTest, WaitForReadyWaitsForTheTargetUntilTheDeadline) {
  SKIP_WITHOUT_DEVICE();
  // Nothing listens on port 1.
  auto client = Client::Connect("127.0.0.1:1");
  ASSERT_TRUE(client.ok());
  CallOptions o;
  o.timeout = absl::Milliseconds(300);
  EXPECT_EQ(CallOnFour(**client, "copy", o, TestPlatform()).status().code(),
            absl::StatusCode::kUnavailable);
  o.wait_for_ready = true;
  EXPECT_EQ(CallOnFour(**client, "copy", o, TestPlatform()).status().code(),
            absl::StatusCode::kDeadlineExceeded);
}

// A process whose calls are all blocking ones has nothing driving gRPC
// between them: before PauseBeforeRetry, a target that came back stayed
// unreachable from it (each call failed at once on the broken connection,
// and the reconnection was never completed).
TEST(ClientOptionsTest, APauseBeforeARetryEndsOnceTheTargetIsBackAndTheCallThenWorks) {
  SKIP_WITHOUT_DEVICE();
  auto first = ChildProcess::Start(FARCALL_AGENT_BIN, AgentArgs());
  ASSERT_TRUE(first.ok()) << first.status();
  const int port = (*first)->port();
  auto client = Client::Connect((*first)->address());
  ASSERT_TRUE(client.ok());
  ASSERT_TRUE(CallOnFour(**client, "copy", {}, TestPlatform()).ok());
  ASSERT_EQ((*first)->Terminate(), 0);
  EXPECT_EQ(CallOnFour(**client, "copy", {}, TestPlatform()).status().code(),
            absl::StatusCode::kUnavailable);
  // Nothing listens: the pause is as long as asked.
  absl::Time start = absl::Now();
  (*client)->PauseBeforeRetry(absl::Milliseconds(300));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(300));

  std::vector<std::string> args = AgentArgs();
  args.push_back(absl::StrCat("--listen=127.0.0.1:", port));
  auto second = ChildProcess::Start(FARCALL_AGENT_BIN, args);
  ASSERT_TRUE(second.ok()) << second.status();
  start = absl::Now();
  (*client)->PauseBeforeRetry(absl::Seconds(30));
  // gRPC's reconnect back-off is at most 1 s for farcall's channels.
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_TRUE(CallOnFour(**client, "copy", {}, TestPlatform()).ok());
  // Connected: a pause asked for is a pause (the target refused for a reason).
  start = absl::Now();
  (*client)->PauseBeforeRetry(absl::Milliseconds(200));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(200));
}

// busy_poll changes how the calling thread waits, never what the call
// does: the answer is the same, a call longer than the polling goes on
// asleep, and the deadline still ends a call that is polling (polling for
// a second must not hold a 50 ms deadline back).
TEST(ClientOptionsTest, ABusyPollingCallGetsItsAnswerAndEndsAtItsDeadline) {
  auto agent = ChildProcess::Start(FARCALL_AGENT_BIN, {"--listen=127.0.0.1:0"});
  ASSERT_TRUE(agent.ok()) << agent.status();
  auto client = Client::Connect((*agent)->address());
  ASSERT_TRUE(client.ok());
  CallOptions o;
  o.busy_poll = absl::Milliseconds(5);
  for (int i = 0; i < 20; ++i) {
    absl::StatusOr<CallResult> r = CallOnFour(**client, "copy", o);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->transport, Transport::kGrpc);
    ASSERT_EQ(r->rpc, Rpc::kUnary);
    const float* y = r->results[0].as<float>();
    EXPECT_EQ(std::vector<float>(y, y + 4), std::vector<float>({1, 2, 3, 4}));
  }
  // Longer than the polling: it sleeps for the rest.
  EXPECT_TRUE((*client)->Call(SleepRequest(100), o).ok());

  o.busy_poll = absl::Seconds(1);
  o.timeout = absl::Milliseconds(50);
  const absl::Time start = absl::Now();
  absl::StatusOr<CallResult> r = (*client)->Call(SleepRequest(5000), o);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded) << r.status();
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(700));
}

}  // namespace
}  // namespace farcall
