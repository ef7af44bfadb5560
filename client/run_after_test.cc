#include "client/run_after.h"

#include <atomic>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace farcall::client_internal {
namespace {

// A thread that waits for a later task while other threads take every task
// there is must look again, not read the empty queue's top (which it did:
// undefined behaviour, caught by the sanitizers). Later tasks, then sooner
// ones, from several threads at once, while the pool's threads run them.
TEST(RunAfterTest, EveryTaskRunsWhileOtherThreadsEmptyTheQueue) {
  constexpr int kThreads = 8, kEach = 500;
  std::atomic<int> ran{0};
  absl::Notification all;
  std::vector<std::thread> adders;
  for (int t = 0; t < kThreads; ++t) {
    adders.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        // Due times that go back and forth, so that waiters wake for
        // earlier tasks that others may have run already.
        const absl::Duration delay = absl::Microseconds(((i + t) % 7) * 150);
        RunAfter(delay, [&] {
          if (++ran == kThreads * kEach) all.Notify();
        });
      }
    });
  }
  for (std::thread& t : adders) t.join();
  EXPECT_TRUE(all.WaitForNotificationWithTimeout(absl::Seconds(60)));
  EXPECT_EQ(ran.load(), kThreads * kEach);
}

// Tasks that block (an attempt asking its target first) do not hold up the
// rest: a thread starts for the next task while every other one is busy.
TEST(RunAfterTest, BlockedTasksDoNotHoldUpTheNextOnes) {
  constexpr int kBlocked = 12;
  absl::Notification release;
  std::atomic<int> started{0}, finished{0};
  for (int i = 0; i < kBlocked; ++i) {
    RunAfter(absl::ZeroDuration(), [&] {
      ++started;
      release.WaitForNotification();
      ++finished;  // the last touch of the test's locals
    });
  }
  absl::Notification ran;
  RunAfter(absl::ZeroDuration(), [&] { ran.Notify(); });
  const bool ok = ran.WaitForNotificationWithTimeout(absl::Seconds(30));
  release.Notify();
  EXPECT_TRUE(ok) << started.load() << " blocked tasks held every thread";
  // The blocked tasks end before the test's locals go.
  for (absl::Time end = absl::Now() + absl::Seconds(30); finished.load() < kBlocked;) {
    ASSERT_LT(absl::Now(), end);
  }
}

// Tasks run in the order they fall due.
TEST(RunAfterTest, ALaterTaskWaitsForItsTime) {
  absl::Notification done;
  const absl::Time start = absl::Now();
  absl::Time ran_at;
  RunAfter(absl::Milliseconds(50), [&] {
    ran_at = absl::Now();
    done.Notify();
  });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_GE(ran_at - start, absl::Milliseconds(50));
}

}  // namespace
}  // namespace farcall::client_internal
