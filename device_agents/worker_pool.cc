#include "device_agents/worker_pool.h"

#include <algorithm>
#include <utility>

namespace farcall::agent {

WorkerPool::WorkerPool(int threads, int max_threads, std::function<void(int)> on_stuck, int spares)
    : base_(std::max(threads, 1)),
      max_(std::max(max_threads, std::max(threads, 1))),
      on_stuck_(std::move(on_stuck)),
      spares_(std::max(spares, 0)) {
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

void WorkerPool::StartThread(bool spare) {
  slots_.emplace_back();
  Slot* s = &slots_.back();
  s->spare = spare;
  ++live_;
  if (spare) ++spares_live_;
  s->thread = std::thread([this, s] { Loop(s); });
}

void WorkerPool::Reap() {
  for (auto it = slots_.begin(); it != slots_.end();) {
    if (!it->done) {
      ++it;
      continue;
    }
    it->thread.join();  // it has left, or is about to
    it = slots_.erase(it);
  }
}

void WorkerPool::Submit(std::function<void()> work, absl::Time deadline,
                        const std::string& tenant) {
  absl::MutexLock l(&mu_);
  std::deque<Work>& q = queues_[tenant];
  if (q.empty()) turns_.push_back(tenant);
  q.push_back({std::move(work), deadline, tenant});
  changed_ = true;
  // More tenants wait without a thread than threads are free (every
  // thread runs other tenants' work, or those free are spoken for): a
  // spare runs this one.
  if (spares_live_ < spares_ && !stopping_ && !holding_.contains(tenant) &&
      TenantsWaitingWithoutAThread() > live_ - busy_) {
    Reap();
    StartThread(/*spare=*/true);
  }
}

int WorkerPool::TenantsWaitingWithoutAThread() const {
  int n = 0;
  for (const std::string& t : turns_) n += holding_.contains(t) ? 0 : 1;
  return n;
}

WorkerPool::Work WorkerPool::Next() {
  auto pick = turns_.begin();
  int fewest = -1;
  for (auto it = turns_.begin(); it != turns_.end(); ++it) {
    auto h = holding_.find(*it);
    const int held = h == holding_.end() ? 0 : h->second;
    if (fewest < 0 || held < fewest) {
      fewest = held;
      pick = it;
    }
  }
  const std::string tenant = *pick;
  turns_.erase(pick);
  auto q = queues_.find(tenant);
  Work work = std::move(q->second.front());
  q->second.pop_front();
  if (q->second.empty()) {
    queues_.erase(q);
  } else {
    turns_.push_back(tenant);  // its next work waits for its next turn
  }
  return work;
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
  int stuck = 0, regular = 0;
  for (const Slot& s : slots_) {
    const bool is_stuck = s.busy && s.deadline <= now;
    stuck += is_stuck ? 1 : 0;
    regular += is_stuck && !s.spare ? 1 : 0;
  }
  if (stuck != stuck_) {
    stuck_ = stuck;
    if (on_stuck_) on_stuck_(stuck);
  }
  return regular;
}

void WorkerPool::Loop(Slot* slot) {
  for (;;) {
    Work work;
    {
      absl::MutexLock l(&mu_);
      // A spare thread stays only while a tenant waits without a thread.
      if (slot->spare && TenantsWaitingWithoutAThread() == 0) {
        slot->done = true;
        --live_;
        --spares_live_;
        return;
      }
      mu_.Await(absl::Condition(
          +[](WorkerPool* p)
               ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) { return p->stopping_ || !p->turns_.empty(); },
          this));
      if (turns_.empty()) {  // stopping, and nothing left to run
        --live_;
        if (slot->spare) --spares_live_;
        return;
      }
      work = Next();
      slot->busy = true;
      slot->deadline = work.deadline;
      slot->tenant = work.tenant;
      ++holding_[work.tenant];
      ++busy_;
      changed_ = true;
      // Work taken past its deadline is stuck from the start.
      if (max_ > base_ && work.deadline <= absl::Now()) CountStuck(absl::Now());
    }
    work.fn();
    absl::MutexLock l(&mu_);
    slot->busy = false;
    slot->deadline = absl::InfiniteFuture();
    if (auto h = holding_.find(slot->tenant); h != holding_.end() && --h->second <= 0) {
      holding_.erase(h);
    }
    slot->tenant.clear();
    --busy_;
    changed_ = true;
    // A thread started for stuck work leaves once enough others are free
    // of it (the watcher joins it).
    if (!slot->spare && !stopping_ && max_ > base_ &&
        live_ - spares_live_ - CountStuck(absl::Now()) > base_) {  // spares apart
      slot->done = true;
      --live_;
      return;
    }
  }
}

void WorkerPool::Watch() {
  absl::MutexLock l(&mu_);
  while (!stopping_) {
    Reap();
    const absl::Time now = absl::Now();
    const int stuck = CountStuck(now);
    while (!turns_.empty() && live_ - spares_live_ - stuck < base_ && live_ - spares_live_ < max_) {
      StartThread();
    }
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
