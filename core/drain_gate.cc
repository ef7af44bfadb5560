#include "core/drain_gate.h"

#include <algorithm>

namespace farcall {

bool DrainGate::Enter() {
  absl::MutexLock l(&mu_);
  if (draining_) {
    last_refused_ = absl::Now();
    return false;
  }
  ++in_flight_;
  last_entered_ = absl::Now();
  return true;
}

void DrainGate::EnterWhileDraining() {
  absl::MutexLock l(&mu_);
  ++in_flight_;
}

void DrainGate::Leave() {
  absl::MutexLock l(&mu_);
  --in_flight_;
}

bool DrainGate::DrainFor(absl::Duration timeout, const std::function<bool()>& held) {
  const absl::Time end = absl::Now() + timeout;
  absl::MutexLock l(&mu_);
  draining_ = true;
  // Calls came lately: more may be on their way, from callers that do not
  // know yet; they are told, for `quiet` at least.
  if (const absl::Time now = absl::Now(); now - last_entered_ < 4 * quiet_) {
    last_refused_ = std::max(last_refused_, now);
  }
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return in_flight_ == 0; };
  while (true) {
    const absl::Duration wait = std::min(end - absl::Now(), absl::Milliseconds(250));
    if (mu_.AwaitWithTimeout(absl::Condition(&idle), wait)) {
      const absl::Time now = absl::Now();
      const absl::Time quiet_from = last_refused_ + quiet_;
      if (now >= quiet_from && (!held || !held())) return true;
      // Idle, but calls still come, or it is held: wait a while without
      // the lock (an idle condition would hold it, and keep calls from
      // entering).
      bool never = false;
      const absl::Time until = std::min({end, now + wait, std::max(quiet_from, now)});
      mu_.AwaitWithTimeout(absl::Condition(&never), std::max(until - now, absl::Milliseconds(1)));
    }
    if (absl::Now() >= end) return false;
  }
}

bool DrainGate::draining() const {
  absl::MutexLock l(&mu_);
  return draining_;
}

int DrainGate::in_flight() const {
  absl::MutexLock l(&mu_);
  return in_flight_;
}

}  // namespace farcall
