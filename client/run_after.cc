#include "client/run_after.h"

#include <queue>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"

namespace farcall::client_internal {
namespace {

// Tasks by due time, run by a pool of threads that grows as tasks need
// them, up to kMaxThreads (never stopped: the process may exit with tasks
// pending). A thread starts when a task is added, or taken with more left,
// while no thread is idle (a task may block: an attempt may ask its target
// first); at the cap, tasks wait for a thread. Not a thread per task: a rollout that
// refuses thousands of calls at once must not start thousands of threads
// (and thread creation that fails aborts).
class Scheduler {
 public:
  static constexpr int kMaxThreads = 64;

  void Add(absl::Time due, std::function<void()> task) {
    bool start = false;
    {
      absl::MutexLock l(&mu_);
      tasks_.push(Task{due, next_++, std::move(task)});
      if (idle_ == 0 && threads_ < kMaxThreads) {
        ++threads_;
        ++idle_;  // the new thread's, from its start
        start = true;
      }
    }
    if (start) std::thread([this] { Loop(); }).detach();
  }

 private:
  struct Task {
    absl::Time due;
    uint64_t order;  // first come, first run among equal times
    std::function<void()> run;
    bool operator>(const Task& o) const { return due != o.due ? due > o.due : order > o.order; }
  };

  void Loop() {
    for (;;) {
      std::function<void()> run;
      bool start = false;
      {
        absl::MutexLock l(&mu_);
        for (;;) {
          auto has_task = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !tasks_.empty(); };
          mu_.Await(absl::Condition(&has_task));
          const absl::Time due = tasks_.top().due;
          if (due <= absl::Now()) break;
          // Until it is due, or an earlier task comes. Another thread may
          // have taken every task meanwhile: then look again.
          auto earlier = [this, due]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
            return tasks_.empty() || tasks_.top().due < due;
          };
          mu_.AwaitWithDeadline(absl::Condition(&earlier), due);
        }
        run = std::move(const_cast<Task&>(tasks_.top()).run);
        tasks_.pop();
        --idle_;
        // Tasks added while every thread was about to take one: one more
        // thread for the rest, as Add would have started.
        start = !tasks_.empty() && idle_ == 0 && threads_ < kMaxThreads;
        if (start) {
          ++threads_;
          ++idle_;
        }
      }
      if (start) std::thread([this] { Loop(); }).detach();
      run();
      absl::MutexLock l(&mu_);
      ++idle_;
    }
  }

  absl::Mutex mu_;
  uint64_t next_ ABSL_GUARDED_BY(mu_) = 0;
  int threads_ ABSL_GUARDED_BY(mu_) = 0;  // started
  int idle_ ABSL_GUARDED_BY(mu_) = 0;     // not running a task
  std::priority_queue<Task, std::vector<Task>, std::greater<Task>> tasks_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

void RunAfter(absl::Duration delay, std::function<void()> task) {
  static auto* scheduler = new Scheduler;  // never freed: its threads outlive main
  scheduler->Add(absl::Now() + delay, std::move(task));
}

}  // namespace farcall::client_internal
