// Ends calls whose client stopped making progress, so that a silent or
// stalled client holds no memory or budget for long:
//   1. Each call (a WatchedCall) marks when it starts to wait on its client,
//      to send the next message or to take the next answer, and when that
//      wait ends.
//   2. An IdleWatchdog thread wakes a few times per limit and asks each call
//      whether it has waited too long: `idle` always (--stream_idle_timeout),
//      or the shorter `stall` while the call holds budget that other calls
//      are waiting for (--stream_stall_timeout).
//   3. A call that has is ended through its EndIdle(): the error names the
//      flag, and its memory is freed at once.
//   4. While other calls wait for the budget, a call that holds budget and
//      moves its bytes (Progress) slower than `min_bytes_per_second`,
//      averaged over `stall`, is ended the same way: a client that drips a
//      byte now and then never waits long, yet holds memory all the same
//      (--min_stream_bytes_per_second).
//   5. Past `max_call` from its start (--max_call_seconds) a call is ended
//      in whatever phase it waits: for the budget (EndQueued), or on its
//      client. A running handler is told by the call's own deadline.
//
// Thread safety: everything here is thread-safe. The watchdog holds a
// reference on each call it asks, so a call may leave (Remove) at any time.
#ifndef FARCALL_DEVICE_AGENTS_IDLE_WATCHDOG_H_
#define FARCALL_DEVICE_AGENTS_IDLE_WATCHDOG_H_

#include <cstdint>
#include <functional>
#include <set>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/ref_counted.h"

namespace farcall::agent {

struct IdleLimits {
  absl::Duration idle = absl::Seconds(60);  // zero: never
  absl::Duration stall = absl::Seconds(5);  // zero: only `idle` applies
  double min_bytes_per_second = 0;          // zero: no rate is asked
  absl::Duration max_call = absl::InfiniteDuration();
};

// DEADLINE_EXCEEDED: the call ran past `limit` (--max_call_seconds).
absl::Status MaxCallTimeError(absl::Duration limit);

class WatchedCall : public RefCounted {
 public:
  // What the call waits for: nothing the watchdog judges (its handler
  // runs), its client to send or to read, or the budget.
  enum class Wait { kNone, kSend, kRead, kBudget };

  // Ends the call through EndIdle() if it has waited on its client past
  // what `limits` allow (`contended`: other calls wait for the budget).
  void ExpireIfIdle(absl::Time now, const IdleLimits& limits, bool contended);
  // Ends the call with `error` as ExpireIfIdle would, now, if it waits for
  // the budget or for its client to send (not for its client to read: an
  // answer on its way is left to go). True if it did.
  bool EndWaiting(const absl::Status& error);
  // What the call was ended with (ExpireIfIdle, EndWaiting); OK while not.
  absl::Status EndedWith();

 protected:
  // Before each read or write that waits on the client (`now`: for tests).
  void AwaitClient(Wait w, absl::Time now = absl::Now());
  // On each read or write completion: false when the call was ended as
  // idle (then the caller must not touch the call any more).
  bool Resume();
  // Whether the call holds budget now (only such calls stall others).
  void SetHoldsBudget(bool holds);
  // Whether the call moves bytes with its client now (uploads or
  // downloads), so that its rate is judged; and the bytes it moved.
  void SetMoving(bool moving);
  void Progress(int64_t bytes);
  // Ends the call; `waited` is what the client failed to do (kSend or
  // kRead), `error` says for how long and names the flag.
  virtual void EndIdle(Wait waited, const absl::Status& error) = 0;
  // Ends a call that waits for the budget (Wait::kBudget) with `error`.
  virtual void EndQueued(const absl::Status& error) { EndIdle(Wait::kBudget, error); }

 private:
  absl::Mutex mu_;
  const absl::Time started_ = absl::Now();
  Wait waiting_ ABSL_GUARDED_BY(mu_) = Wait::kNone;
  absl::Time since_ ABSL_GUARDED_BY(mu_);
  bool expired_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status ended_with_ ABSL_GUARDED_BY(mu_);  // set with expired_
  bool holds_budget_ ABSL_GUARDED_BY(mu_) = false;
  bool moving_ ABSL_GUARDED_BY(mu_) = false;
  int64_t moved_ ABSL_GUARDED_BY(mu_) = 0;
  // The window the rate is measured over: since when, and moved_ then.
  absl::Time window_start_ ABSL_GUARDED_BY(mu_);
  int64_t window_moved_ ABSL_GUARDED_BY(mu_) = 0;
};

class IdleWatchdog {
 public:
  // `contended` says whether calls wait for the budget now.
  IdleWatchdog(IdleLimits limits, std::function<bool()> contended);
  ~IdleWatchdog();
  IdleWatchdog(const IdleWatchdog&) = delete;
  IdleWatchdog& operator=(const IdleWatchdog&) = delete;

  void Add(WatchedCall* call);
  void Remove(WatchedCall* call);

 private:
  void Loop();

  const IdleLimits limits_;
  const std::function<bool()> contended_;
  const absl::Duration tick_;
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::set<WatchedCall*> calls_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace farcall::agent

#endif  // FARCALL_DEVICE_AGENTS_IDLE_WATCHDOG_H_
