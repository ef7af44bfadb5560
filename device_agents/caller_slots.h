// How many calls one caller may have in flight on an agent at once
// (--tenant_max_calls), so that a tenant's many slow calls cannot hold
// every worker and budget byte while another's wait. A caller is a
// principal (core/tokens.h: a token, or the caller a router's capability
// names); calls without one (an agent without tokens, where every caller
// is one) are not counted.
//
// Thread safety: thread-safe.
#ifndef FARCALL_DEVICE_AGENTS_CALLER_SLOTS_H_
#define FARCALL_DEVICE_AGENTS_CALLER_SLOTS_H_

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace farcall::agent {

class CallerSlots {
 public:
  // `max_per_caller` > 0.
  explicit CallerSlots(int64_t max_per_caller) : max_(max_per_caller) {}

  // One more call of `principal`, or RESOURCE_EXHAUSTED naming the flag
  // when it has `max_per_caller` in flight. Give() each slot taken.
  absl::Status Take(const std::string& principal);
  void Give(const std::string& principal);
  int64_t held(const std::string& principal) const;

 private:
  const int64_t max_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, int64_t> held_ ABSL_GUARDED_BY(mu_);
};

}  // namespace farcall::agent

#endif  // FARCALL_DEVICE_AGENTS_CALLER_SLOTS_H_
