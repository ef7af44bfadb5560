#include "core/drain_gate.h"

#include <algorithm>

namespace farcall {

bool DrainGate::Enter() {
  absl::MutexLock l(&mu_);
  if (draining_) return false;
  ++in_flight_;
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
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return in_flight_ == 0; };
  if (!held) return mu_.AwaitWithTimeout(absl::Condition(&idle), timeout);
  while (true) {
    const absl::Duration left = end - absl::Now();
    const absl::Duration wait = std::min(left, absl::Milliseconds(250));
    if (mu_.AwaitWithTimeout(absl::Condition(&idle), wait)) {
      if (!held()) return true;
      // Idle, but still held: wait a while without the lock (an idle
      // condition would hold it, and keep calls from entering).
      bool never = false;
      mu_.AwaitWithTimeout(absl::Condition(&never), std::min(end - absl::Now(), wait));
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
