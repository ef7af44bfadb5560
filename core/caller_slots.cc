#include "core/caller_slots.h"

#include "absl/strings/str_cat.h"

namespace farcall {

absl::Status CallerSlots::Take(const std::string& principal, Limit limit, bool* took) {
  *took = false;
  if (principal.empty() || limit.max <= 0) return absl::OkStatus();
  absl::MutexLock l(&mu_);
  int64_t& held = held_[principal];
  if (held >= limit.max) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "this caller has ", held, " calls in flight ", where_, ", its most (",
        limit.from_tokens_file ? "max_calls=" : "--tenant_max_calls=", limit.max,
        limit.from_tokens_file ? " on its tokens-file line" : "", "); retry when one ends."));
  }
  ++held;
  *took = true;
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

}  // namespace farcall
