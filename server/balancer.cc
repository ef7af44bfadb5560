#include "server/balancer.h"

#include "absl/random/random.h"
#include "core/rendezvous.h"

namespace farcall::router {

std::shared_ptr<AgentHandle> PickAgent(
    const std::vector<std::shared_ptr<AgentHandle>>& candidates) {
  if (candidates.size() == 1) return candidates[0];
  thread_local absl::BitGen gen;
  const size_t n = candidates.size();
  size_t a = absl::Uniform<size_t>(gen, 0, n);
  size_t b = absl::Uniform<size_t>(gen, 0, n - 1);
  if (b >= a) ++b;  // distinct from a
  return candidates[a]->inflight.load() <= candidates[b]->inflight.load() ? candidates[a]
                                                                          : candidates[b];
}

std::shared_ptr<AgentHandle> PickAgentFor(
    absl::string_view key, const std::vector<std::shared_ptr<AgentHandle>>& candidates) {
  std::shared_ptr<AgentHandle> best;
  uint64_t best_score = 0;
  for (const auto& c : candidates) {
    const uint64_t score = RendezvousScore(key, c->address);
    if (best == nullptr || score > best_score) {
      best = c;
      best_score = score;
    }
  }
  return best;
}

}  // namespace farcall::router
