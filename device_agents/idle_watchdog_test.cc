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
  using WatchedCall::Progress;
  using WatchedCall::Resume;
  using WatchedCall::SetHoldsBudget;
  using WatchedCall::SetMoving;
  std::string ended;  // the error's message, once ended
  Wait waited = Wait::kNone;
  bool queued_end = false;  // ended through EndQueued

 private:
  void EndIdle(Wait w, const absl::Status& error) override {
    waited = w;
    ended = std::string(error.message());
    EXPECT_EQ(error.code(), absl::StatusCode::kDeadlineExceeded);
  }
  void EndQueued(const absl::Status& error) override {
    queued_end = true;
    EndIdle(Wait::kBudget, error);
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

// A drain that runs out ends calls waiting for the budget or for their
// client's inputs, once; it leaves a call whose answer is on its way to its
// client, and one that waits for nothing (its handler runs).
TEST(WatchedCallTest, EndWaitingEndsOnlyCallsWaitingForTheBudgetOrTheirInputs) {
  const absl::Status cut = absl::DeadlineExceededError("cut");
  FakeCall* running = new FakeCall;
  EXPECT_FALSE(running->EndWaiting(cut));
  EXPECT_EQ(running->ended, "");
  FakeCall* answering = new FakeCall;
  answering->AwaitClient(FakeCall::Wait::kRead);
  EXPECT_FALSE(answering->EndWaiting(cut));
  EXPECT_EQ(answering->ended, "");
  FakeCall* sending = new FakeCall;
  sending->AwaitClient(FakeCall::Wait::kSend);
  EXPECT_TRUE(sending->EndWaiting(cut));
  EXPECT_EQ(sending->ended, "cut");
  EXPECT_EQ(sending->waited, FakeCall::Wait::kSend);
  EXPECT_FALSE(sending->EndWaiting(cut));  // once
  EXPECT_FALSE(sending->Resume());         // the read that completes late finds it ended
  FakeCall* queued = new FakeCall;
  queued->AwaitClient(FakeCall::Wait::kBudget);
  EXPECT_TRUE(queued->EndWaiting(cut));
  EXPECT_TRUE(queued->queued_end);
  for (FakeCall* c : {running, answering, sending, queued}) c->Unref();
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

// A client that drips a byte now and then is never silent for the stall
// limit, yet holds memory others wait for: its rate is what is judged,
// over the time others wait, and only while it moves bytes.
TEST(WatchedCallTest, ASlowDripIsEndedOnlyWhileOthersWait) {
  IdleLimits limits = kLimits;
  limits.min_bytes_per_second = 1 << 20;
  FakeCall* c = new FakeCall;
  const absl::Time t0 = absl::Now();
  c->SetHoldsBudget(true);
  c->SetMoving(true);
  // A byte shortly before each look: never silent for the stall limit.
  auto drip_then_look = [&](absl::Duration at, bool contended) {
    c->Progress(1);
    c->AwaitClient(FakeCall::Wait::kSend, t0 + at - absl::Milliseconds(100));
    c->ExpireIfIdle(t0 + at, limits, contended);
  };
  drip_then_look(absl::Seconds(4), true);
  EXPECT_EQ(c->ended, "");  // not yet a whole window
  drip_then_look(absl::Milliseconds(5500), false);
  EXPECT_EQ(c->ended, "");  // nobody waits: the window starts again
  drip_then_look(absl::Seconds(8), true);
  EXPECT_EQ(c->ended, "");  // 2.5s of contention so far
  drip_then_look(absl::Milliseconds(10500), true);
  EXPECT_EQ(c->waited, FakeCall::Wait::kSend);
  EXPECT_EQ(c->ended,
            "the caller moved 2 bytes in 5s while other calls waited for its memory, under the "
            "1048576 bytes per second asked of it (--min_stream_bytes_per_second); the call was "
            "ended.");
  c->Unref();
}

TEST(WatchedCallTest, AFastCallerOrOneThatIsNotMovingIsNotJudgedByItsRate) {
  IdleLimits limits{absl::Hours(1), absl::Seconds(1), 1 << 20};
  FakeCall* fast = new FakeCall;
  const absl::Time t0 = absl::Now();
  fast->SetHoldsBudget(true);
  fast->SetMoving(true);
  for (int s = 1; s <= 5; ++s) {
    const absl::Time t = t0 + absl::Milliseconds(999) * s;
    fast->Progress(2 << 20);  // 2 MiB/s
    fast->AwaitClient(FakeCall::Wait::kRead, t - absl::Milliseconds(10));
    fast->ExpireIfIdle(t, limits, true);
  }
  EXPECT_EQ(fast->ended, "");
  fast->Unref();
  // Its handler runs (not moving): no rate is asked.
  FakeCall* running = new FakeCall;
  running->SetHoldsBudget(true);
  running->AwaitClient(FakeCall::Wait::kSend, t0 + absl::Seconds(4));
  running->ExpireIfIdle(t0 + absl::Seconds(4) + absl::Milliseconds(900), limits, true);
  EXPECT_EQ(running->ended, "");
  running->Unref();
}

TEST(WatchedCallTest, MaxCallTimeEndsAWaitForTheBudgetOrTheClient) {
  IdleLimits limits = kLimits;
  FakeCall* q = new FakeCall;
  q->AwaitClient(FakeCall::Wait::kBudget);
  q->ExpireIfIdle(absl::Now() + absl::Hours(5), limits, true);
  EXPECT_EQ(q->ended, "");  // waiting for memory is never idleness
  limits.max_call = absl::Hours(1);
  q->ExpireIfIdle(absl::Now() + absl::Minutes(59), limits, true);
  EXPECT_EQ(q->ended, "");
  q->ExpireIfIdle(absl::Now() + absl::Minutes(61), limits, true);
  EXPECT_TRUE(q->queued_end);
  EXPECT_EQ(q->ended, "the call ran past this agent's limit of 1h per call (--max_call_seconds).");
  EXPECT_FALSE(q->Resume());
  q->Unref();
  FakeCall* up = new FakeCall;
  up->AwaitClient(FakeCall::Wait::kSend);
  up->ExpireIfIdle(absl::Now() + absl::Minutes(61), limits, false);
  EXPECT_FALSE(up->queued_end);
  EXPECT_EQ(up->waited, FakeCall::Wait::kSend);
  EXPECT_EQ(up->ended, "the call ran past this agent's limit of 1h per call (--max_call_seconds).");
  up->Unref();
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
