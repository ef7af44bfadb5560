// The `tenant` label of per-call metrics: which tenant (principal,
// core/tokens.h) a series counts, in a label set that stays bounded
// whatever callers send. A principal gets its own value, the principal
// itself (`tenant:NAME`, or `token:` and a digest prefix: never a token),
// while fewer than `max` have one: the tokens file's principals first,
// then callers as they come (principals a router's capability names).
// Past that, `other`; calls with no principal are `-`.
//
//   TenantLabels labels(64);
//   labels.Seed(tokens.principals());
//   m.calls.With({..., labels.Of(principal)}).Increment();
//
// Thread safety: thread-safe.
#ifndef FARCALL_CORE_TENANT_LABELS_H_
#define FARCALL_CORE_TENANT_LABELS_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"

namespace farcall {

inline constexpr char kNoTenantLabel[] = "-";
inline constexpr char kOtherTenantsLabel[] = "other";

class TenantLabels {
 public:
  explicit TenantLabels(size_t max) : max_(max) {}
  // Changes the cap (before the first call; values given stay).
  void set_max(size_t max);

  // Gives `principals` their values first (while there is room).
  void Seed(const std::vector<std::string>& principals);
  // The label value for `principal`.
  std::string Of(const std::string& principal);
  // How many principals have a value of their own.
  size_t size() const;

 private:
  mutable absl::Mutex mu_;
  size_t max_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> named_ ABSL_GUARDED_BY(mu_);
};

}  // namespace farcall

#endif  // FARCALL_CORE_TENANT_LABELS_H_
