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
  // False once draining: the call must be refused (and not Leave()).
  bool Enter();
  // Enters even while draining: for the calls a draining server still
  // takes (an agent's calls that name its resident arrays).
  void EnterWhileDraining();
  void Leave();
  // Turns new calls away, then waits until none is in flight, and `held`
  // (if given; asked at least every 250 ms) is false, or `timeout` has
  // passed. True when none is left.
  bool DrainFor(absl::Duration timeout, const std::function<bool()>& held = nullptr);
  bool draining() const;
  int in_flight() const;

 private:
  mutable absl::Mutex mu_;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace farcall

#endif  // FARCALL_CORE_DRAIN_GATE_H_
