// farcall-agent: serves one platform's devices and handlers over gRPC.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "core/process.h"
#include "device_agents/agent_flags.h"
#include "device_agents/agent_service.h"

int main(int argc, char** argv) {
  farcall::InitFarcallProcess();
  farcall::BlockTerminationSignals();
  absl::SetProgramUsageMessage(farcall::agent::kAgentUsage);
  absl::ParseCommandLine(argc, argv);

  auto options = farcall::agent::AgentOptionsFromFlags();
  if (!options.ok()) {
    std::fprintf(stderr, "farcall-agent: %s\n", options.status().ToString().c_str());
    return 2;
  }
  if (std::optional<int> code = farcall::agent::ListDevicesIfAsked(*options)) {
    std::_Exit(*code);
  }
  auto server = farcall::agent::AgentServer::Start(*std::move(options));
  if (!server.ok()) {
    std::fprintf(stderr, "farcall-agent: %s\n", server.status().ToString().c_str());
    return 1;
  }
  farcall::agent::AnnounceServing(**server);

  std::string sig = farcall::WaitForTerminationSignal();
  std::fprintf(stderr, "farcall-agent: %s received, shutting down\n", sig.c_str());
  (*server)->Shutdown();
  // Everything is stopped and flushed; skip gRPC's library teardown at exit,
  // which waits over a second for its internal threads.
  std::fflush(nullptr);
  std::_Exit(0);
}
