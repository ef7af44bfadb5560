// farcall-agent: serves one platform's devices and handlers over gRPC.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "core/log.h"
#include "core/process.h"
#include "core/refusal_audit.h"
#include "core/security_flags.h"
#include "device_agents/agent_flags.h"
#include "device_agents/agent_service.h"

int main(int argc, char** argv) {
  farcall::InitFarcallProcess();
  farcall::BlockTerminationSignals();
  farcall::log::SetUpHelp(farcall::agent::kAgentUsage);
  absl::ParseCommandLine(argc, argv);
  if (absl::Status s = farcall::log::InitFromFlags("farcall-agent"); !s.ok()) {
    std::fprintf(stderr, "farcall-agent: %s\n", s.ToString().c_str());
    return 2;
  }

  auto options = farcall::agent::AgentOptionsFromFlags();
  if (!options.ok()) {
    farcall::log::Error(options.status().ToString());
    return 2;
  }
  if (std::optional<int> code = farcall::agent::ListDevicesIfAsked(*options)) {
    std::_Exit(*code);
  }
  // Shares its tokens and TLS files with the server's: a reload here is the
  // server's too.
  farcall::ReloadableFiles files{options->tokens, options->tls_files,
                                 std::nullopt,    options->verifier,
                                 nullptr,         options->metrics_tokens};
  farcall::ExportReloadMetrics();
  auto server = farcall::agent::AgentServer::Start(*std::move(options));
  if (!server.ok()) {
    farcall::log::Error(server.status().ToString());
    return 1;
  }
  farcall::agent::AnnounceServing(**server);
  files.serves = farcall::agent::ServesHandler(**server);
  farcall::WarnOfUnservedHandlers(files.tokens, files.serves);

  std::string sig = farcall::WaitForTerminationSignal(
      [&files](bool hangup) { farcall::ReloadFiles(files, hangup); });
  farcall::log::Info(absl::StrCat(sig,
                                  " received: draining (NOT_SERVING, no new calls), "
                                  "then shutting down"));
  (*server)->Shutdown();
  farcall::RefusalAudit::FlushProcessAudit();
  farcall::log::Info("stopped");
  // Everything is stopped and flushed; skip gRPC's library teardown at exit,
  // which waits over a second for its internal threads.
  std::fflush(nullptr);
  std::_Exit(0);
}
