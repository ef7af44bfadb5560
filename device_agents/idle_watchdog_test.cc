#include "device_agents/idle_watchdog.h"

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace farcall::agent {
namespace {

// Records how it was ended; the test drives the waits and the clock.
class FakeCall final : public WatchedCall {
 public:
  using WatchedCall::AwaitClient;
  using WatchedCall::Resume;
  using WatchedCall::SetHoldsBudget;
  std::string ended;  // the error's message, once ended
  Wait waited = Wait::kNone;

 private:
  void EndIdle(Wait w, const absl::Status& error) override {
    waited = w;
    ended = std::string(error.message());
    EXPECT_EQ(error.code(), absl::StatusCode::kDeadlineExceeded);
  }
};

const IdleLimits kLimits{absl::Seconds(60), absl::Seconds(5)};

TEST(WatchedCallTest, OnlyACallWaitingOnItsClientPastTheLimitIsEnded) {
  FakeCall* c = new FakeCall;
  const absl::Time t0 = absl::Now();
  c->ExpireIfIdle(t0 + absl::Hours(1), kLimits, false);
  EXPECT_EQ(c->ended, "");  // not waiting on its client (the handler runs)
  c->AwaitClient(FakeCall::Wait::kSend);
  c->ExpireIfIdle(t0 + absl::Seconds(30), kLimits, false);
  EXPECT_EQ(c->ended, "");
  c->ExpireIfIdle(t0 + absl::Seconds(61), kLimits, false);
  EXPECT_EQ(c->ended,
            "the caller sent nothing for 1m (--stream_idle_timeout); the call was ended.");
  EXPECT_FALSE(c->Resume());  // the read that completes late finds it ended
  c->Unref();
}

TEST(WatchedCallTest, TheStallLimitAppliesOnlyToCallsHoldingMemoryOthersWaitFor) {
  FakeCall* c = new FakeCall;
  const absl::Time t0 = absl::Now();
  c->AwaitClient(FakeCall::Wait::kRead);
  const absl::Time later = t0 + absl::Seconds(6);
  c->ExpireIfIdle(later, kLimits, /*contended=*/true);
  EXPECT_EQ(c->ended, "");  // holds no budget
  c->SetHoldsBudget(true);
  c->ExpireIfIdle(later, kLimits, /*contended=*/false);
  EXPECT_EQ(c->ended, "");  // nobody waits
  c->ExpireIfIdle(later, kLimits, /*contended=*/true);
  EXPECT_EQ(c->waited, FakeCall::Wait::kRead);
  EXPECT_EQ(c->ended,
            "the caller read no results for 5s while other calls waited for its memory "
            "(--stream_stall_timeout); the call was ended.");
  c->Unref();
}

TEST(WatchedCallTest, ZeroLimitsNeverEnd) {
  FakeCall* c = new FakeCall;
  c->AwaitClient(FakeCall::Wait::kSend);
  c->SetHoldsBudget(true);
  c->ExpireIfIdle(absl::Now() + absl::Hours(100),
                  IdleLimits{absl::ZeroDuration(), absl::ZeroDuration()}, true);
  EXPECT_EQ(c->ended, "");
  c->Unref();
}

TEST(IdleWatchdogTest, ItsThreadEndsAnIdleCall) {
  class Signalling final : public WatchedCall {
   public:
    using WatchedCall::AwaitClient;
    absl::Notification ended;

   private:
    void EndIdle(Wait, const absl::Status&) override { ended.Notify(); }
  };
  auto* c = new Signalling;
  {
    IdleWatchdog w(IdleLimits{absl::Milliseconds(20), absl::ZeroDuration()}, [] { return false; });
    c->AwaitClient(Signalling::Wait::kSend);
    w.Add(c);
    EXPECT_TRUE(c->ended.WaitForNotificationWithTimeout(absl::Seconds(30)));
    w.Remove(c);
  }
  c->Unref();
}

TEST(IdleWatchdogTest, CallsComingAndGoingWhileItScansAreEndedAtMostOnce) {
  class Counting final : public WatchedCall {
   public:
    using WatchedCall::AwaitClient;
    using WatchedCall::Resume;
    std::atomic<int> ends{0};

   private:
    void EndIdle(Wait, const absl::Status&) override { ++ends; }
  };
  // A limit so short that the watchdog ends some of the calls mid-wait.
  IdleWatchdog w(IdleLimits{absl::Microseconds(200), absl::ZeroDuration()}, [] { return false; });
  std::atomic<int> ended{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 300; ++i) {
        auto* c = new Counting;
        w.Add(c);
        c->AwaitClient(Counting::Wait::kSend);
        if (c->Resume()) {  // not ended: it may wait again
          c->AwaitClient(Counting::Wait::kRead);
          c->Resume();
        }
        w.Remove(c);
        EXPECT_LE(c->ends.load(), 1);
        ended += c->ends.load();
        c->Unref();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_LE(ended.load(), 1200);
}

}  // namespace
}  // namespace farcall::agent
