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
