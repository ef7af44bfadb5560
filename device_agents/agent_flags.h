// The farcall-agent command line, shared by the agent binary and by programs
// that embed the agent (python -m farcall.agent), so that every agent takes
// the same flags with the same defaults and messages.
//
//   absl::ParseCommandLine(argc, argv);
//   absl::StatusOr<AgentServer::Options> options = AgentOptionsFromFlags();
//   if (std::optional<int> code = ListDevicesIfAsked(*options)) return *code;
//   auto server = AgentServer::Start(*options);
//   AnnounceServing(**server);
#ifndef FARCALL_DEVICE_AGENTS_AGENT_FLAGS_H_
#define FARCALL_DEVICE_AGENTS_AGENT_FLAGS_H_

#include <functional>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "device_agents/agent_service.h"

namespace farcall::agent {

// The usage line both agents print.
inline constexpr char kAgentUsage[] =
    "farcall-agent --platform=cpu|cuda|rocm|oneapi --listen=HOST:PORT "
    "[--plugins=A.so,B.so]";

// The options the parsed flags ask for. INVALID_ARGUMENT with the contract's
// message for an unknown platform, and for bad --devices.
absl::StatusOr<AgentServer::Options> AgentOptionsFromFlags();

// With --list_devices: prints the platform's devices and returns the exit
// code (0 when there is one, 1 when none). nullopt without the flag.
std::optional<int> ListDevicesIfAsked(const AgentServer::Options& options);

// Prints what the agent serves to stderr and reports the bound ports on
// --ready_fd.
void AnnounceServing(const AgentServer& server);
// Whether `server` serves a handler of that name on its platform (for
// ReloadableFiles::serves); `server` must outlive it.
std::function<bool(const std::string&)> ServesHandler(const AgentServer& server);

}  // namespace farcall::agent

#endif  // FARCALL_DEVICE_AGENTS_AGENT_FLAGS_H_
