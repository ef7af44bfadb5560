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
//
// Thread safety: everything here is thread-safe. The watchdog holds a
// reference on each call it asks, so a call may leave (Remove) at any time.
#ifndef FARCALL_DEVICE_AGENTS_IDLE_WATCHDOG_H_
#define FARCALL_DEVICE_AGENTS_IDLE_WATCHDOG_H_

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
};

class WatchedCall : public RefCounted {
 public:
  enum class Wait { kNone, kSend, kRead };

  // Ends the call through EndIdle() if it has waited on its client past
  // what `limits` allow (`contended`: other calls wait for the budget).
  void ExpireIfIdle(absl::Time now, const IdleLimits& limits, bool contended);

 protected:
  // Before each read or write that waits on the client.
  void AwaitClient(Wait w);
  // On each read or write completion: false when the call was ended as
  // idle (then the caller must not touch the call any more).
  bool Resume();
  // Whether the call holds budget now (only such calls stall others).
  void SetHoldsBudget(bool holds);
  // Ends the call; `waited` is what the client failed to do, `error` says
  // for how long and names the flag.
  virtual void EndIdle(Wait waited, const absl::Status& error) = 0;

 private:
  absl::Mutex mu_;
  Wait waiting_ ABSL_GUARDED_BY(mu_) = Wait::kNone;
  absl::Time since_ ABSL_GUARDED_BY(mu_);
  bool expired_ ABSL_GUARDED_BY(mu_) = false;
  bool holds_budget_ ABSL_GUARDED_BY(mu_) = false;
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
