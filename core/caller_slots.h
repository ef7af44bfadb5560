// How many calls one caller may have in flight at once on an agent or
// through a router (--tenant_max_calls, or max_calls= on its tokens-file
// line), so that a tenant's many slow calls cannot hold every worker and
// budget byte while another's wait. A caller is a principal (core/tokens.h:
// a token or its tenant, or the caller a router's capability names); calls
// without one (a server without tokens, where every caller is one) are not
// counted.
//
// Thread safety: thread-safe.
#ifndef FARCALL_CORE_CALLER_SLOTS_H_
#define FARCALL_CORE_CALLER_SLOTS_H_

#include <cstdint>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace farcall {

class CallerSlots {
 public:
  // `where`: the server, as refusals name it ("on this agent").
  explicit CallerSlots(std::string where = "on this agent") : where_(std::move(where)) {}

  // The most calls a caller may have in flight, and where that limit was
  // set (for the refusal's message).
  struct Limit {
    int64_t max = 0;  // 0: none
    bool from_tokens_file = false;
  };

  // One more call of `principal`, or RESOURCE_EXHAUSTED naming the limit
  // when it has `limit.max` in flight. Give() each slot taken (a call
  // without a principal or a limit takes none: false in `took`).
  absl::Status Take(const std::string& principal, Limit limit, bool* took);
  void Give(const std::string& principal);
  int64_t held(const std::string& principal) const;

 private:
  const std::string where_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, int64_t> held_ ABSL_GUARDED_BY(mu_);
};

}  // namespace farcall

#endif  // FARCALL_CORE_CALLER_SLOTS_H_
