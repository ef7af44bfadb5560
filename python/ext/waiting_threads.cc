#include "python/ext/waiting_threads.h"

#include <algorithm>
#include <thread>
#include <utility>

namespace farcall::python {

WaitingThreads::WaitingThreads(int max_threads, absl::Duration idle_for)
    : max_threads_(std::max(max_threads, 1)), idle_for_(idle_for) {}

void WaitingThreads::Run(std::function<void()> task) {
  absl::MutexLock l(&mu_);
  tasks_.push_back(std::move(task));
  // An idle thread takes it, or one that frees up when none may start.
  if (idle_ >= static_cast<int>(tasks_.size()) || threads_ >= max_threads_) return;
  ++threads_;
  ++idle_;  // the new thread counts as idle until it takes a task
  peak_ = std::max(peak_, threads_);
  std::thread([this] { Loop(); }).detach();
}

void WaitingThreads::Loop() {
  absl::MutexLock l(&mu_);
  for (;;) {
    auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !tasks_.empty(); };
    if (!mu_.AwaitWithTimeout(absl::Condition(&ready), idle_for_)) {
      --idle_;
      --threads_;
      return;
    }
    std::function<void()> task = std::move(tasks_.front());
    tasks_.pop_front();
    --idle_;
    mu_.Unlock();
    task();
    task = nullptr;  // what it holds goes before the thread waits again
    mu_.Lock();
    ++idle_;
  }
}

bool WaitingThreads::AwaitThreadsAtMost(int n, absl::Duration timeout) const {
  absl::MutexLock l(&mu_);
  auto few = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return threads_ <= n; };
  return mu_.AwaitWithTimeout(absl::Condition(&few), timeout);
}

int WaitingThreads::peak_threads() const {
  absl::MutexLock l(&mu_);
  return peak_;
}

}  // namespace farcall::python
