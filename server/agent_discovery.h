// Turning the router's --agents entries into agent addresses.
//
//   HOST:PORT           one agent (gRPC resolves HOST itself)
//   dns:///NAME:PORT    every address NAME resolves to is an agent, e.g. a
//                       Kubernetes headless service; re-resolved on every
//                       probe round, so agents that scale up or down are
//                       picked up and dropped.
#ifndef FARCALL_SERVER_AGENT_DISCOVERY_H_
#define FARCALL_SERVER_AGENT_DISCOVERY_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace farcall::router {

// True for entries that name a set of agents (dns:///...).
bool IsMultiAgentSource(const std::string& source);

// OK when `source` has one of the forms above with a port of 1 to 65535;
// INVALID_ARGUMENT saying which form it misses (another scheme, such as
// dns://NAME:PORT with two slashes, no port, a port that is no number).
absl::Status CheckAgentSource(const std::string& source);

// The agent addresses `source` stands for, as "IP:PORT" ("[IPv6]:PORT").
// UNAVAILABLE when a dns:/// name does not resolve; INVALID_ARGUMENT when it
// has no port.
absl::StatusOr<std::vector<std::string>> ExpandAgentSource(const std::string& source);

}  // namespace farcall::router

#endif  // FARCALL_SERVER_AGENT_DISCOVERY_H_
