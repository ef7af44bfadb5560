// Calls in flight on a server, and the gate that closes to new ones when
// the server drains for shutdown (--drain_seconds): a server refuses calls
// once draining, and waits for the ones it holds to finish.
//
//   if (!gate.Enter()) return Refuse();  // at the start of each call
//   ...
//   gate.Leave();                        // when the call is done
//
//   gate.DrainFor(absl::Seconds(30));    // at shutdown
//
// A drain ends only once no call has been turned away for `quiet` (500 ms),
// and, when calls came in the last 4 x `quiet` before it began, lasts at
// least that long: routers and clients that chose this server before it
// drained learn that it drains from the refusal, which they send elsewhere
// as a call that never ran, instead of finding its port closed, on which a
// call with side effects could not be sent elsewhere. A server without
// recent calls, and nothing in flight, stops at once.
//
// Thread safety: thread-safe.
#ifndef FARCALL_CORE_DRAIN_GATE_H_
#define FARCALL_CORE_DRAIN_GATE_H_

#include <functional>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace farcall {

class DrainGate {
 public:
  explicit DrainGate(absl::Duration quiet = absl::Milliseconds(500)) : quiet_(quiet) {}
  // False once draining: the call must be refused (and not Leave()).
  bool Enter();
  // Enters even while draining: for the calls a draining server still
  // takes (an agent's calls that name its resident arrays).
  void EnterWhileDraining();
  void Leave();
  // Turns new calls away, then waits until none is in flight, none was
  // turned away for `quiet`, and `held` (if given; asked at least every
  // 250 ms) is false, or `timeout` has passed. True when all three held
  // before it passed.
  bool DrainFor(absl::Duration timeout, const std::function<bool()>& held = nullptr);
  bool draining() const;
  int in_flight() const;

 private:
  const absl::Duration quiet_;
  mutable absl::Mutex mu_;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time last_refused_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Time last_entered_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace farcall

#endif  // FARCALL_CORE_DRAIN_GATE_H_
