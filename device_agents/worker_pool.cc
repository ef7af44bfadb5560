#include "device_agents/worker_pool.h"

#include <algorithm>
#include <utility>

namespace farcall::agent {

WorkerPool::WorkerPool(int threads, int max_threads, std::function<void(int)> on_stuck)
    : base_(std::max(threads, 1)),
      max_(std::max(max_threads, std::max(threads, 1))),
      on_stuck_(std::move(on_stuck)) {
  absl::MutexLock l(&mu_);
  for (int i = 0; i < base_; ++i) StartThread();
  if (max_ > base_) watcher_ = std::thread([this] { Watch(); });
}

WorkerPool::~WorkerPool() {
  {
    absl::MutexLock l(&mu_);
    stopping_ = true;
  }
  if (watcher_.joinable()) watcher_.join();
  // No thread starts now; the ones there run what is queued and leave.
  std::list<Slot> slots;
  {
    absl::MutexLock l(&mu_);
    slots.swap(slots_);
  }
  for (Slot& s : slots) s.thread.join();
}

void WorkerPool::StartThread() {
  slots_.emplace_back();
  Slot* s = &slots_.back();
  ++live_;
  s->thread = std::thread([this, s] { Loop(s); });
}

void WorkerPool::Submit(std::function<void()> work, absl::Time deadline) {
  absl::MutexLock l(&mu_);
  queue_.push_back({std::move(work), deadline});
  changed_ = true;
}

int WorkerPool::threads() const {
  absl::MutexLock l(&mu_);
  return live_;
}

int WorkerPool::stuck() const {
  absl::MutexLock l(&mu_);
  return stuck_;
}

int WorkerPool::CountStuck(absl::Time now) {
  int stuck = 0;
  for (const Slot& s : slots_) stuck += (s.busy && s.deadline <= now) ? 1 : 0;
  if (stuck != stuck_) {
    stuck_ = stuck;
    if (on_stuck_) on_stuck_(stuck);
  }
  return stuck;
}

void WorkerPool::Loop(Slot* slot) {
  for (;;) {
    Work work;
    {
      absl::MutexLock l(&mu_);
      mu_.Await(absl::Condition(
          +[](WorkerPool* p)
               ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) { return p->stopping_ || !p->queue_.empty(); },
          this));
      if (queue_.empty()) {  // stopping, and nothing left to run
        --live_;
        return;
      }
      work = std::move(queue_.front());
      queue_.pop_front();
      slot->busy = true;
      slot->deadline = work.deadline;
      changed_ = true;
      // Work taken past its deadline is stuck from the start.
      if (max_ > base_ && work.deadline <= absl::Now()) CountStuck(absl::Now());
    }
    work.fn();
    absl::MutexLock l(&mu_);
    slot->busy = false;
    slot->deadline = absl::InfiniteFuture();
    changed_ = true;
    // A thread started for stuck work leaves once enough others are free
    // of it (the watcher joins it).
    if (!stopping_ && max_ > base_ && live_ - CountStuck(absl::Now()) > base_) {
      slot->done = true;
      --live_;
      return;
    }
  }
}

void WorkerPool::Watch() {
  absl::MutexLock l(&mu_);
  while (!stopping_) {
    for (auto it = slots_.begin(); it != slots_.end();) {
      if (!it->done) {
        ++it;
        continue;
      }
      it->thread.join();  // it has left, or is about to
      it = slots_.erase(it);
    }
    const absl::Time now = absl::Now();
    const int stuck = CountStuck(now);
    while (!queue_.empty() && live_ - stuck < base_ && live_ < max_) StartThread();
    // Wake at the next deadline of running work, or at a change.
    absl::Time next = absl::InfiniteFuture();
    for (const Slot& s : slots_) {
      if (s.busy && s.deadline > now) next = std::min(next, s.deadline);
    }
    changed_ = false;
    mu_.AwaitWithDeadline(absl::Condition(
                              +[](WorkerPool* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) {
                                return p->stopping_ || p->changed_;
                              },
                              this),
                          next);
  }
}

}  // namespace farcall::agent
