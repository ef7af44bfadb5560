// Admission of calls against the agent's byte budget for calls in flight
// (--max_inflight_bytes). A call that fits is admitted at once; one that
// does not waits, first come first served, until earlier calls release
// their bytes; one larger than the whole budget is refused.
//
// Thread safety: all methods are thread-safe. Resume callbacks run on the
// thread that released the bytes, outside the lock.
#ifndef FARCALL_DEVICE_AGENTS_ADMISSION_H_
#define FARCALL_DEVICE_AGENTS_ADMISSION_H_

#include <cstdint>
#include <deque>
#include <functional>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace farcall::agent {

class Admission {
 public:
  explicit Admission(int64_t budget) : budget_(budget) {}

  int64_t budget() const { return budget_; }
  int64_t held() const;
  size_t waiting() const;

  // Reserves `bytes` if they fit now and nobody is waiting ahead.
  bool TryAcquire(int64_t bytes);
  // Queues a call whose `bytes` did not fit; once they do, they are
  // reserved for it and `resume` runs. Returns a ticket for Cancel().
  uint64_t Wait(int64_t bytes, std::function<void()> resume);
  // Takes a waiting call out of the queue. True if it was still waiting
  // (its resume will never run); false if it was already admitted.
  bool Cancel(uint64_t ticket);
  // Gives bytes back and admits the waiters that now fit, in order.
  void Release(int64_t bytes);

 private:
  struct Waiter {
    uint64_t ticket;
    int64_t bytes;
    std::function<void()> resume;
  };
  const int64_t budget_;
  mutable absl::Mutex mu_;
  int64_t held_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_ticket_ ABSL_GUARDED_BY(mu_) = 1;
  std::deque<Waiter> queue_ ABSL_GUARDED_BY(mu_);
};

// One call's wait for the budget, which the call may withdraw (it was
// cancelled) at any moment, even before the wait is queued: exactly one of
// `go` (admitted) and `withdrawn` runs, unless the call was admitted at once
// (then `go` ran and a withdrawal does nothing).
class BudgetWait {
 public:
  // Runs `go` now if the bytes fit, else once they do, through `resume`
  // (which hands it to a thread of the caller's: the bytes are freed by
  // whichever thread ends another call), or `withdrawn` if Withdraw() comes
  // first.
  using Executor = std::function<void(std::function<void()>)>;
  void Admit(Admission& admission, int64_t bytes, std::function<void()> go,
             std::function<void()> withdrawn, Executor resume);
  // The call no longer wants the bytes.
  void Withdraw(Admission& admission);

 private:
  void Cancel(Admission& admission, uint64_t ticket);

  absl::Mutex mu_;
  uint64_t ticket_ ABSL_GUARDED_BY(mu_) = 0;
  bool withdraw_asked_ ABSL_GUARDED_BY(mu_) = false;
  std::function<void()> withdrawn_ ABSL_GUARDED_BY(mu_);
};

}  // namespace farcall::agent

#endif  // FARCALL_DEVICE_AGENTS_ADMISSION_H_
