#include "device_agents/caller_slots.h"

#include "absl/strings/str_cat.h"

namespace farcall::agent {

absl::Status CallerSlots::Take(const std::string& principal) {
  if (principal.empty()) return absl::OkStatus();
  absl::MutexLock l(&mu_);
  int64_t& held = held_[principal];
  if (held >= max_) {
    return absl::ResourceExhaustedError(absl::StrCat("this caller has ", held,
                                                     " calls in flight on this agent, its most "
                                                     "(--tenant_max_calls=",
                                                     max_, "); retry when one ends."));
  }
  ++held;
  return absl::OkStatus();
}

void CallerSlots::Give(const std::string& principal) {
  if (principal.empty()) return;
  absl::MutexLock l(&mu_);
  auto it = held_.find(principal);
  if (it != held_.end() && --it->second <= 0) held_.erase(it);
}

int64_t CallerSlots::held(const std::string& principal) const {
  absl::MutexLock l(&mu_);
  auto it = held_.find(principal);
  return it != held_.end() ? it->second : 0;
}

}  // namespace farcall::agent
