#include "core/drain_gate.h"

namespace farcall {

bool DrainGate::Enter() {
  absl::MutexLock l(&mu_);
  if (draining_) return false;
  ++in_flight_;
  return true;
}

void DrainGate::Leave() {
  absl::MutexLock l(&mu_);
  --in_flight_;
}

bool DrainGate::DrainFor(absl::Duration timeout) {
  absl::MutexLock l(&mu_);
  draining_ = true;
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return in_flight_ == 0; };
  return mu_.AwaitWithTimeout(absl::Condition(&idle), timeout);
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
