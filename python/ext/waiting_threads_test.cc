#include "python/ext/waiting_threads.h"

#include <atomic>
#include <memory>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace farcall::python {
namespace {

// Tasks that block until released, counting how many run at once.
struct Gate {
  absl::Mutex mu;
  bool open = false;
  int running = 0, most = 0, done = 0;
  void Task() {
    absl::MutexLock l(&mu);
    most = std::max(most, ++running);
    auto opened = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return open; };
    mu.Await(absl::Condition(&opened));
    --running;
    ++done;
  }
};

// What the tasks touch is shared with them: a task's thread may still be
// leaving the gate's mutex when the test sees its count.
TEST(WaitingThreadsTest, ManyBlockedTasksShareAtMostTheCapOfThreadsAndAllRun) {
  auto shared_gate = std::make_shared<Gate>();
  Gate& gate = *shared_gate;
  WaitingThreads pool(8, absl::Seconds(10));
  for (int i = 0; i < 200; ++i) pool.Run([shared_gate] { shared_gate->Task(); });
  {
    absl::MutexLock l(&gate.mu);
    auto eight = [&gate]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(gate.mu) { return gate.running == 8; };
    gate.mu.Await(absl::Condition(&eight));  // the cap's worth run; the rest queue
    EXPECT_EQ(gate.done, 0);
    gate.open = true;
    auto all = [&gate]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(gate.mu) { return gate.done == 200; };
    gate.mu.Await(absl::Condition(&all));
    EXPECT_EQ(gate.most, 8);
  }
  EXPECT_EQ(pool.peak_threads(), 8);
}

TEST(WaitingThreadsTest, AnIdleThreadTakesTheNextTaskInsteadOfANewThread) {
  WaitingThreads pool(8, absl::Seconds(10));
  for (int i = 0; i < 20; ++i) {
    auto ran = std::make_shared<absl::Notification>();
    pool.Run([ran] { ran->Notify(); });
    ran->WaitForNotification();
    // The thread is back waiting before the next task comes (without this
    // wait, a task that comes while the thread is still between tasks
    // rightly starts another thread).
    ASSERT_TRUE(pool.AwaitIdleAtLeast(1, absl::Seconds(20)));
  }
  // One at a time: the first thread serves them all.
  EXPECT_EQ(pool.peak_threads(), 1);
}

TEST(WaitingThreadsTest, IdleThreadsEndAfterTheirIdleTime) {
  WaitingThreads pool(4, absl::Milliseconds(50));
  auto gate = std::make_shared<Gate>();
  gate->open = true;
  for (int i = 0; i < 4; ++i) pool.Run([gate] { gate->Task(); });
  // Idle threads leave 50 ms after their last task.
  EXPECT_TRUE(pool.AwaitThreadsAtMost(0, absl::Seconds(20)));
  // And the pool starts threads again afterwards.
  auto ran = std::make_shared<absl::Notification>();
  pool.Run([ran] { ran->Notify(); });
  EXPECT_TRUE(ran->WaitForNotificationWithTimeout(absl::Seconds(20)));
}

TEST(WaitingThreadsTest, DestroyingAPoolRunsWhatIsQueuedAndWaitsForItsThreads) {
  auto count = std::make_shared<std::atomic<int>>(0);
  {
    WaitingThreads pool(2, absl::Seconds(10));
    for (int i = 0; i < 50; ++i) pool.Run([count] { ++*count; });
  }
  EXPECT_EQ(count->load(), 50);
}

}  // namespace
}  // namespace farcall::python
