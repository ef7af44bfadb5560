#include "core/tenant_labels.h"

namespace farcall {

void TenantLabels::set_max(size_t max) {
  absl::MutexLock l(&mu_);
  max_ = max;
}

void TenantLabels::Seed(const std::vector<std::string>& principals) {
  for (const std::string& p : principals) Of(p);
}

std::string TenantLabels::Of(const std::string& principal) {
  if (principal.empty()) return kNoTenantLabel;
  absl::MutexLock l(&mu_);
  if (named_.contains(principal)) return principal;
  if (named_.size() >= max_) return kOtherTenantsLabel;
  named_.insert(principal);
  return principal;
}

size_t TenantLabels::size() const {
  absl::MutexLock l(&mu_);
  return named_.size();
}

}  // namespace farcall
