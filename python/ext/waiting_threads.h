// Threads that wait for remote calls for the XLA FFI handler, each running
// one blocking task at a time: started as tasks need them, kept for reuse
// while idle for less than `idle_for`, and never more than `max_threads`
// at once. Past that, tasks queue in order and start as threads free up:
// a program that issues hundreds of asynchronous callbacks at once gets
// `max_threads` of them on the wire together, not hundreds of threads.
//
// Why not the client's asynchronous calls: gRPC's callback API keeps
// threads of its own polling every connection for the rest of the process,
// so that every blocking call after it is answered through one of them and
// a hand-off (about 40 us of a 250 us call on loopback). A thread blocked
// in Client::Call reads its own answer.
//
// Thread safe. Destroying a pool runs the tasks queued, then waits for its
// threads to end (the FFI handler's pool is never destroyed).
#ifndef FARCALL_PYTHON_EXT_WAITING_THREADS_H_
#define FARCALL_PYTHON_EXT_WAITING_THREADS_H_

#include <functional>
#include <memory>

#include "absl/time/time.h"

namespace farcall::python {

class WaitingThreads {
 public:
  WaitingThreads(int max_threads, absl::Duration idle_for);
  ~WaitingThreads();
  WaitingThreads(const WaitingThreads&) = delete;
  WaitingThreads& operator=(const WaitingThreads&) = delete;
  // Runs `task` on a thread of the pool, now or once one is free.
  void Run(std::function<void()> task);
  // Waits up to `timeout` for at most `n` threads to be alive; whether
  // they are.
  bool AwaitThreadsAtMost(int n, absl::Duration timeout) const;
  // Waits up to `timeout` for at least `n` threads to be idle, waiting for
  // a task; whether they are.
  bool AwaitIdleAtLeast(int n, absl::Duration timeout) const;
  // The most threads that were ever alive at once.
  int peak_threads() const;

  // Shared with the threads (waiting_threads.cc).
  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace farcall::python

#endif  // FARCALL_PYTHON_EXT_WAITING_THREADS_H_
