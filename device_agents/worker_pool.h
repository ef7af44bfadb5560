// A fixed pool of threads that run handlers, so that no handler ever runs on
// one of gRPC's threads.
//
// Thread safety: Submit() from any thread. The destructor runs the queued
// work, then joins.
#ifndef FARCALL_DEVICE_AGENTS_WORKER_POOL_H_
#define FARCALL_DEVICE_AGENTS_WORKER_POOL_H_

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace farcall::agent {

class WorkerPool {
 public:
  explicit WorkerPool(int threads);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  void Submit(std::function<void()> work);

 private:
  void Loop();

  absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace farcall::agent

#endif  // FARCALL_DEVICE_AGENTS_WORKER_POOL_H_
