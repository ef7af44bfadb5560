// Choosing an agent: power of two choices on calls in flight.
#ifndef FARCALL_SERVER_BALANCER_H_
#define FARCALL_SERVER_BALANCER_H_

#include <memory>
#include <vector>

#include "server/agent_pool.h"

namespace farcall::router {

// Picks two distinct candidates at random and returns the one with fewer
// calls in flight. Precondition: `candidates` is not empty.
std::shared_ptr<AgentHandle> PickAgent(
    const std::vector<std::shared_ptr<AgentHandle>>& candidates);

}  // namespace farcall::router

#endif  // FARCALL_SERVER_BALANCER_H_
