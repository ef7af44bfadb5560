#include "device_agents/serial_steps.h"

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "device_agents/worker_pool.h"
#include "gtest/gtest.h"

namespace farcall::agent {
namespace {

SerialSteps::Executor On(WorkerPool& pool) {
  return [&pool](std::function<void()> work) { pool.Submit(std::move(work)); };
}

// Steps added from four threads at once run one at a time, each thread's in
// the order it added them, on a pool of four threads.
TEST(SerialStepsTest, StepsFromManyThreadsRunOneAtATimeInTheirOrder) {
  WorkerPool pool(4);
  SerialSteps steps(On(pool));
  std::atomic<int> running{0};
  std::atomic<bool> overlapped{false};
  absl::Mutex mu;
  std::vector<std::vector<int>> seen(4);
  constexpr int kEach = 500;
  std::atomic<int> done{0};
  absl::Notification all;
  std::vector<std::thread> adders;
  for (int t = 0; t < 4; ++t) {
    adders.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        steps.Add([&, t, i] {
          if (running.fetch_add(1) != 0) overlapped = true;
          {
            absl::MutexLock l(&mu);
            seen[t].push_back(i);
          }
          running.fetch_sub(1);
          if (done.fetch_add(1) + 1 == 4 * kEach) all.Notify();
        });
      }
    });
  }
  for (std::thread& a : adders) a.join();
  all.WaitForNotification();
  EXPECT_FALSE(overlapped.load());
  for (int t = 0; t < 4; ++t) {
    ASSERT_EQ(seen[t].size(), static_cast<size_t>(kEach));
    for (int i = 0; i < kEach; ++i) EXPECT_EQ(seen[t][i], i);
  }
}

// However many steps wait, one executor task serves them.
TEST(SerialStepsTest, OneExecutorTaskAtATimeServesEveryWaitingStep) {
  std::vector<std::function<void()>> tasks;
  SerialSteps steps([&tasks](std::function<void()> work) { tasks.push_back(std::move(work)); });
  int ran = 0;
  for (int i = 0; i < 10; ++i) steps.Add([&ran] { ++ran; });
  ASSERT_EQ(tasks.size(), 1u);
  tasks[0]();
  EXPECT_EQ(ran, 10);
  steps.Add([&ran] { ++ran; });  // the queue ran dry: a new task
  ASSERT_EQ(tasks.size(), 2u);
  tasks[1]();
  EXPECT_EQ(ran, 11);
}

// The last step may destroy what holds the queue (a call that ends there).
TEST(SerialStepsTest, AStepMayDestroyTheSerialSteps) {
  WorkerPool pool(2);
  auto steps = std::make_unique<SerialSteps>(On(pool));
  absl::Notification gone;
  std::atomic<int> ran{0};
  for (int i = 0; i < 3; ++i) steps->Add([&ran] { ++ran; });
  steps->Add([&steps, &gone] {
    steps.reset();
    gone.Notify();
  });
  gone.WaitForNotification();
  EXPECT_EQ(ran.load(), 3);
}

}  // namespace
}  // namespace farcall::agent
