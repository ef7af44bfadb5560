#include "device_agents/worker_pool.h"

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace farcall::agent {
namespace {

TEST(WorkerPoolTest, RunsEverythingSubmittedFromManyThreadsBeforeItIsDestroyed) {
  constexpr int kThreads = 4, kEach = 2000;
  // Plain ints, one per task: the pool's own synchronisation must order
  // each write before the reads below (ThreadSanitizer checks it).
  std::vector<int> done(kThreads * kEach, 0);
  {
    WorkerPool pool(3);
    std::vector<std::thread> submitters;
    for (int t = 0; t < kThreads; ++t) {
      submitters.emplace_back([&, t] {
        for (int i = 0; i < kEach; ++i) pool.Submit([&, k = t * kEach + i] { ++done[k]; });
      });
    }
    for (auto& s : submitters) s.join();
  }  // runs what is queued, then joins
  for (size_t k = 0; k < done.size(); ++k) ASSERT_EQ(done[k], 1) << "task " << k;
}

TEST(WorkerPoolTest, WorkMaySubmitMoreWork) {
  std::atomic<int> ran{0};
  {
    WorkerPool pool(2);
    for (int i = 0; i < 100; ++i) {
      pool.Submit([&] {
        ++ran;
        pool.Submit([&] { ++ran; });
      });
    }
  }
  EXPECT_EQ(ran.load(), 200);
}

// Eight works stuck past their deadline (they wait for a release that comes
// only at the end) hold a fixed pool of 2; an elastic one starts threads
// for the work behind them, counts them as stuck, and shrinks back once
// they end.
TEST(WorkerPoolTest, StuckWorkCountsNoMoreAgainstAnElasticPool) {
  absl::Notification release;
  std::atomic<int> last_stuck{-1};
  WorkerPool pool(2, 12, [&](int n) { last_stuck = n; });
  const absl::Time soon = absl::Now() + absl::Milliseconds(100);
  for (int i = 0; i < 8; ++i) pool.Submit([&] { release.WaitForNotification(); }, soon);
  absl::Notification quick;
  pool.Submit([&] { quick.Notify(); });
  // Past the deadline: 8 stuck, so threads start for the quick work.
  EXPECT_TRUE(quick.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(pool.stuck(), 8);
  EXPECT_EQ(last_stuck.load(), 8);
  EXPECT_LE(pool.threads(), 12);
  EXPECT_GE(pool.threads(), 9);  // 8 stuck, and the one that ran the quick work
  release.Notify();
  // The stuck ones end; the pool goes back to its 2.
  const absl::Time end = absl::Now() + absl::Seconds(10);
  while ((pool.threads() > 2 || pool.stuck() > 0) && absl::Now() < end) {
    absl::Notification n;  // a round trip through the pool
    pool.Submit([&] { n.Notify(); });
    n.WaitForNotification();
  }
  EXPECT_EQ(pool.threads(), 2);
  EXPECT_EQ(pool.stuck(), 0);
}

TEST(WorkerPoolTest, AFixedPoolNeverGrows) {
  absl::Notification release;
  {
    WorkerPool pool(2);
    for (int i = 0; i < 4; ++i) pool.Submit([&] { release.WaitForNotification(); }, absl::Now());
    absl::Notification quick;
    pool.Submit([&] { quick.Notify(); });
    EXPECT_FALSE(quick.WaitForNotificationWithTimeout(absl::Milliseconds(300)));
    EXPECT_EQ(pool.threads(), 2);
    release.Notify();
    EXPECT_TRUE(quick.WaitForNotificationWithTimeout(absl::Seconds(10)));
  }
}

// A free thread takes the work of the tenant holding the fewest threads:
// tenants take turns, first come first served within each.
TEST(WorkerPoolTest, TenantsTakeTurns) {
  absl::Notification gate;
  std::vector<std::string> order;  // written by the pool's one thread
  {
    WorkerPool pool(1);
    absl::Notification blocked;
    pool.Submit([&] {
      blocked.Notify();
      gate.WaitForNotification();
    });
    blocked.WaitForNotification();
    for (int i = 0; i < 3; ++i)
      pool.Submit([&, i] { order.push_back("A" + std::to_string(i)); }, absl::InfiniteFuture(),
                  "A");
    pool.Submit([&] { order.push_back("B0"); }, absl::InfiniteFuture(), "B");
    gate.Notify();
  }
  EXPECT_EQ(order, (std::vector<std::string>{"A0", "B0", "A1", "A2"}));
}

// Tenant C's slow work holds every thread; tenant B's quick work does not
// wait for it: a spare thread runs it, and leaves afterwards.
TEST(WorkerPoolTest, ATenantHoldingNoThreadGetsASpareWhileOthersHoldThemAll) {
  absl::Notification release;
  WorkerPool pool(2, 0, nullptr, /*spares=*/2);
  std::atomic<int> c_running{0};
  for (int i = 0; i < 6; ++i) {
    pool.Submit(
        [&] {
          ++c_running;
          release.WaitForNotification();
        },
        absl::InfiniteFuture(), "C");
  }
  // Both threads run C's work before B's comes.
  for (const absl::Time end = absl::Now() + absl::Seconds(10);
       c_running.load() < 2 && absl::Now() < end;) {
    std::this_thread::yield();
  }
  absl::Notification b_ran;
  pool.Submit([&] { b_ran.Notify(); }, absl::InfiniteFuture(), "B");
  EXPECT_TRUE(b_ran.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_LE(pool.threads(), 3);
  EXPECT_EQ(c_running.load(), 2) << "C's queued work must not take the spare";
  release.Notify();
  // C's work ends; the spare left once no tenant waited without a thread.
  const absl::Time end = absl::Now() + absl::Seconds(10);
  while (pool.threads() > 2 && absl::Now() < end) {
    absl::Notification n;  // a round trip through the pool
    pool.Submit([&] { n.Notify(); }, absl::InfiniteFuture(), "C");
    n.WaitForNotification();
  }
  EXPECT_EQ(pool.threads(), 2);
}

// Two quiet tenants come while a third holds every thread: each gets a
// spare, not one spare for both.
TEST(WorkerPoolTest, EachQuietTenantGetsASpare) {
  // Declared before the pool, which its threads may touch until it is gone.
  absl::Notification release, a_runs, c_ran;
  WorkerPool pool(1, 0, nullptr, /*spares=*/2);
  pool.Submit(
      [&] {
        a_runs.Notify();
        release.WaitForNotification();
      },
      absl::InfiniteFuture(), "A");
  a_runs.WaitForNotification();
  // B's work holds its spare until C's has run: one spare for both would
  // never run C's.
  pool.Submit([&] { EXPECT_TRUE(c_ran.WaitForNotificationWithTimeout(absl::Seconds(10))); },
              absl::InfiniteFuture(), "B");
  pool.Submit([&] { c_ran.Notify(); }, absl::InfiniteFuture(), "C");
  EXPECT_TRUE(c_ran.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_LE(pool.threads(), 3);
  release.Notify();
}

TEST(WorkerPoolTest, WithoutSparesATenantWaitsForAThread) {
  absl::Notification release;
  {
    WorkerPool pool(1);
    pool.Submit([&] { release.WaitForNotification(); }, absl::InfiniteFuture(), "C");
    absl::Notification b_ran;
    pool.Submit([&] { b_ran.Notify(); }, absl::InfiniteFuture(), "B");
    EXPECT_FALSE(b_ran.WaitForNotificationWithTimeout(absl::Milliseconds(200)));
    EXPECT_EQ(pool.threads(), 1);
    release.Notify();
    EXPECT_TRUE(b_ran.WaitForNotificationWithTimeout(absl::Seconds(10)));
  }
}

}  // namespace
}  // namespace farcall::agent
