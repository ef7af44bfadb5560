#include "device_agents/worker_pool.h"

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

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

}  // namespace
}  // namespace farcall::agent
