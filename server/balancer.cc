#include "server/balancer.h"

#include "absl/random/random.h"

namespace farcall::router {

std::shared_ptr<AgentHandle> PickAgent(
    const std::vector<std::shared_ptr<AgentHandle>>& candidates) {
  if (candidates.size() == 1) return candidates[0];
  thread_local absl::BitGen gen;
  const size_t n = candidates.size();
  size_t a = absl::Uniform<size_t>(gen, 0, n);
  size_t b = absl::Uniform<size_t>(gen, 0, n - 1);
  if (b >= a) ++b;  // distinct from a
  return candidates[a]->inflight.load() <= candidates[b]->inflight.load()
             ? candidates[a]
             : candidates[b];
}

}  // namespace farcall::router
