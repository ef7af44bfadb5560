#include "python/ext/waiting_threads.h"

#include <algorithm>
#include <deque>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace farcall::python {

// What the pool and its threads share. Each thread holds it until it has
// returned from its last use of the mutex, so the pool's destructor may go
// on as soon as it sees no thread left.
struct WaitingThreads::State {
  State(int max_threads, absl::Duration idle_for)
      : max_threads(std::max(max_threads, 1)), idle_for(idle_for) {}
  const int max_threads;
  const absl::Duration idle_for;
  absl::Mutex mu;
  std::deque<std::function<void()>> tasks ABSL_GUARDED_BY(mu);
  int threads ABSL_GUARDED_BY(mu) = 0;
  int idle ABSL_GUARDED_BY(mu) = 0;  // threads waiting for a task
  int peak ABSL_GUARDED_BY(mu) = 0;
  bool stopping ABSL_GUARDED_BY(mu) = false;  // the pool is being destroyed
};

namespace {

void Loop(const std::shared_ptr<WaitingThreads::State>& s) {
  absl::MutexLock l(&s->mu);
  for (;;) {
    auto ready = [&s]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu) {
      return !s->tasks.empty() || s->stopping;
    };
    if (!s->mu.AwaitWithTimeout(absl::Condition(&ready), s->idle_for) || s->tasks.empty()) {
      --s->idle;
      --s->threads;
      return;
    }
    std::function<void()> task = std::move(s->tasks.front());
    s->tasks.pop_front();
    --s->idle;
    s->mu.Unlock();
    task();
    task = nullptr;  // what it holds goes before the thread waits again
    s->mu.Lock();
    ++s->idle;
  }
}

}  // namespace

WaitingThreads::WaitingThreads(int max_threads, absl::Duration idle_for)
    : state_(std::make_shared<State>(max_threads, idle_for)) {}

WaitingThreads::~WaitingThreads() {
  State& s = *state_;
  absl::MutexLock l(&s.mu);
  s.stopping = true;  // idle threads leave once the queue is empty
  auto none = [&s]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) { return s.threads == 0; };
  s.mu.Await(absl::Condition(&none));
}

void WaitingThreads::Run(std::function<void()> task) {
  State& s = *state_;
  absl::MutexLock l(&s.mu);
  s.tasks.push_back(std::move(task));
  // An idle thread takes it, or one that frees up when none may start.
  if (s.idle >= static_cast<int>(s.tasks.size()) || s.threads >= s.max_threads) return;
  ++s.threads;
  ++s.idle;  // the new thread counts as idle until it takes a task
  s.peak = std::max(s.peak, s.threads);
  std::thread([state = state_] { Loop(state); }).detach();
}

bool WaitingThreads::AwaitThreadsAtMost(int n, absl::Duration timeout) const {
  State& s = *state_;
  absl::MutexLock l(&s.mu);
  auto few = [&s, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) { return s.threads <= n; };
  return s.mu.AwaitWithTimeout(absl::Condition(&few), timeout);
}

bool WaitingThreads::AwaitIdleAtLeast(int n, absl::Duration timeout) const {
  State& s = *state_;
  absl::MutexLock l(&s.mu);
  auto idle = [&s, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) { return s.idle >= n; };
  return s.mu.AwaitWithTimeout(absl::Condition(&idle), timeout);
}

int WaitingThreads::peak_threads() const {
  State& s = *state_;
  absl::MutexLock l(&s.mu);
  return s.peak;
}

}  // namespace farcall::python
