// A pool of threads that run handlers, so that no handler ever runs on one
// of gRPC's threads.
//
// Work belongs to a tenant (the principal its call runs as; "" for work of
// no one's). A free thread takes the work of the tenant that holds the
// fewest threads, first come first served within a tenant, so that one
// tenant's queue does not keep the others' waiting. A pool made with
// `spares` starts up to that many threads more for a tenant whose work
// waits while it holds no thread and none is free (another tenant's slow
// calls hold them all); a spare thread leaves once no such tenant waits.
//
// A pool made with `max_threads` above `threads` is elastic: work still
// running past the deadline it was submitted with is "stuck", and counts no
// more against `threads`. While work waits and fewer than `threads` threads
// are free of stuck work, the pool starts another thread, up to
// `max_threads` in all; once the stuck work ends, threads beyond `threads`
// leave as they finish. So handlers that never return on time (a Python
// handler asleep past its call's deadline) cannot hold up the calls behind
// them, while the pool stays bounded.
//
//   WorkerPool pool(4, /*max_threads=*/16, [](int stuck) { gauge.Set(stuck); });
//   pool.Submit(work, call_deadline);
//
// Thread safety: Submit() from any thread. The destructor runs the queued
// work, then joins (stuck work too: handlers must return).
#ifndef FARCALL_DEVICE_AGENTS_WORKER_POOL_H_
#define FARCALL_DEVICE_AGENTS_WORKER_POOL_H_

#include <deque>
#include <functional>
#include <list>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace farcall::agent {

class WorkerPool {
 public:
  // `max_threads` <= `threads`: a fixed pool. `on_stuck`, if given, is told
  // the number of stuck works whenever it changes (from the pool's
  // threads; it must not block or Submit).
  explicit WorkerPool(int threads, int max_threads = 0, std::function<void(int)> on_stuck = nullptr,
                      int spares = 0);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // `deadline`: when the work counts as stuck if it still runs (elastic
  // pools only); `tenant`: whose work it is.
  void Submit(std::function<void()> work, absl::Time deadline = absl::InfiniteFuture(),
              const std::string& tenant = "");

  // Threads now (spares included), and works running past their deadline
  // now (as the pool last counted them).
  int threads() const;
  int stuck() const;

 private:
  struct Work {
    std::function<void()> fn;
    absl::Time deadline;
    std::string tenant;
  };
  struct Slot {
    std::thread thread;
    bool busy = false;
    bool spare = false;
    absl::Time deadline = absl::InfiniteFuture();
    std::string tenant;  // whose work it runs
    bool done = false;   // its thread left (to be joined)
  };
  void StartThread(bool spare = false) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Joins the threads that left.
  void Reap() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes the next work: the queued tenant holding the fewest threads.
  Work Next() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The tenants whose work waits while they hold no thread.
  int TenantsWaitingWithoutAThread() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Loop(Slot* slot);
  // Elastic pools: counts stuck work and starts threads as needed, until
  // the pool stops.
  void Watch();
  // Counts the stuck works at `now` (and tells on_stuck of a change, spares
  // included); returns those on threads other than spares, which are what
  // the pool's own size is weighed against.
  int CountStuck(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int base_;
  const int max_;
  const std::function<void(int)> on_stuck_;
  mutable absl::Mutex mu_;
  const int spares_;
  // Queued work by tenant, and the tenants with work queued, in turn.
  absl::flat_hash_map<std::string, std::deque<Work>> queues_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> turns_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, int> holding_ ABSL_GUARDED_BY(mu_);  // threads per tenant
  int busy_ ABSL_GUARDED_BY(mu_) = 0;
  int spares_live_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool changed_ ABSL_GUARDED_BY(mu_) = false;  // wakes the watcher
  std::list<Slot> slots_ ABSL_GUARDED_BY(mu_);
  int live_ ABSL_GUARDED_BY(mu_) = 0;  // slots whose thread has not left
  int stuck_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread watcher_;
};

}  // namespace farcall::agent

#endif  // FARCALL_DEVICE_AGENTS_WORKER_POOL_H_
