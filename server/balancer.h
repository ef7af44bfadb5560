// Choosing an agent: power of two choices on calls in flight; a call with
// side effects and a call_id always goes to the same agent while that agent
// is live, so that the agent that remembers the id sees its repeats.
#ifndef FARCALL_SERVER_BALANCER_H_
#define FARCALL_SERVER_BALANCER_H_

#include <memory>
#include <vector>

#include "absl/strings/string_view.h"
#include "server/agent_pool.h"

namespace farcall::router {

// Picks two distinct candidates at random and returns the one with fewer
// calls in flight. Precondition: `candidates` is not empty.
std::shared_ptr<AgentHandle> PickAgent(const std::vector<std::shared_ptr<AgentHandle>>& candidates);

// The candidate that `key` maps to (rendezvous hashing on the agents'
// addresses): the same while the candidates are, and when one goes only
// its keys move. Precondition: `candidates` is not empty.
std::shared_ptr<AgentHandle> PickAgentFor(
    absl::string_view key, const std::vector<std::shared_ptr<AgentHandle>>& candidates);

}  // namespace farcall::router

#endif  // FARCALL_SERVER_BALANCER_H_
