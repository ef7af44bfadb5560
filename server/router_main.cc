// farcall-router: picks a live agent by platform, handler and load, and
// forwards calls to it.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "core/capability.h"
#include "core/limit_flags.h"
#include "core/log.h"
#include "core/process.h"
#include "core/refusal_audit.h"
#include "core/security_flags.h"
#include "core/status_macros.h"
#include "core/version.h"
#include "server/agent_discovery.h"
#include "server/router_service.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:50050", "HOST:PORT to serve on; port 0 picks a free one");
ABSL_FLAG(std::vector<std::string>, agents, {},
          "comma-separated agent addresses (HOST:PORT, or dns:///NAME:PORT)");
ABSL_FLAG(int64_t, max_call_bytes, int64_t{16} << 30, "largest call the router forwards, in bytes");
ABSL_FLAG(std::string, metrics_listen, "",
          "HOST:PORT to serve Prometheus /metrics on; a bare PORT binds loopback only "
          "(empty: off)");
ABSL_FLAG(int, probe_interval_ms, 250, "how often agents' health is checked");
ABSL_FLAG(int64_t, tenant_max_calls, 0,
          "the most calls one tenant (a token or its tokens-file tenant) may have in flight "
          "through this router at once; more are refused with RESOURCE_EXHAUSTED (0: no limit; "
          "a tokens-file line's max_calls= wins)");
ABSL_FLAG(int, metrics_max_tenants, 64,
          "tenants (the tokens file's first, then callers as they come) whose calls metrics "
          "label with their own `tenant` value; the rest are labelled 'other'");
ABSL_FLAG(std::string, agent_tls_ca, "",
          "reach agents over TLS, trusting this PEM CA (empty: plaintext)");
ABSL_FLAG(std::string, agent_tls_cert, "", "the router's PEM client certificate for agents");
ABSL_FLAG(std::string, agent_tls_key, "", "the PEM private key of --agent_tls_cert");
ABSL_FLAG(std::string, agent_tls_server_name, "",
          "check agents' TLS certificates against this name instead of each agent's "
          "address (agents found with dns:///, which share one certificate)");
ABSL_FLAG(std::string, agent_token_file, "",
          "a file with the router's own token for agents that need one (default: "
          "each caller's token is passed on)");
ABSL_FLAG(bool, allow_unauthenticated_callers, false,
          "serve callers with no token or certificate although the router holds credentials "
          "for agents (--agent_token_file, --capability_signing_key_file, --agent_tls_cert): "
          "they then reach whatever those credentials reach");
ABSL_FLAG(int, ready_fd, -1, "write the bound port to this file descriptor once serving");

namespace {

// Who may call the router, for its start-up line; INVALID_ARGUMENT when the
// flags leave a door open. A router that holds credentials for agents and
// authenticates no caller would lend them to anyone; one that calls agents
// as itself (--agent_token_file) without capabilities would show them one
// principal for every caller, whose exactly-once answers they would then
// share.
absl::StatusOr<std::string> CallerAuthentication(const farcall::ServerSecurity& security) {
  const bool agent_token = !absl::GetFlag(FLAGS_agent_token_file).empty();
  const bool credentials =
      agent_token || security.signer.has_value() || !absl::GetFlag(FLAGS_agent_tls_cert).empty();
  if (!security.authenticates_callers()) {
    if (!credentials) return std::string("callers need no token");
    if (absl::GetFlag(FLAGS_allow_unauthenticated_callers)) {
      return std::string(
          "callers need no token although this router holds credentials for agents "
          "(--allow_unauthenticated_callers)");
    }
    return absl::InvalidArgumentError(
        "this router holds credentials for agents (--agent_token_file, "
        "--capability_signing_key_file or --agent_tls_cert) but authenticates no caller, so "
        "anyone could call through it what its credentials allow: give it --tokens_file or "
        "--require_client_cert, or --allow_unauthenticated_callers if that is meant.");
  }
  if (agent_token && !security.signer.has_value()) {
    return absl::InvalidArgumentError(
        "with --agent_token_file the router calls agents as itself, so they would see one "
        "principal for every caller and share exactly-once answers among them: give it "
        "--capability_signing_key_file too, so that each forwarded call carries its "
        "caller's principal, signed.");
  }
  if (security.signer.has_value() && !security.tokens.required()) {
    // A capability names its caller by the token's principal; a client
    // certificate gives none, so every caller would be one principal.
    return absl::InvalidArgumentError(
        "--capability_signing_key_file signs each caller's principal, which comes from its "
        "token, and this router takes client certificates without tokens: every caller would "
        "be the same principal to the agents (and share exactly-once answers). Give it "
        "--tokens_file too.");
  }
  return security.tokens.required()
             ? absl::StrCat("callers need one of ", security.tokens.size(), " token(s)")
             : std::string("callers need a client certificate");
}

}  // namespace

int main(int argc, char** argv) {
  farcall::InitFarcallProcess();
  farcall::BlockTerminationSignals();
  farcall::log::SetUpHelp("farcall-router --listen=HOST:PORT --agents=ADDR[,ADDR...]");
  absl::ParseCommandLine(argc, argv);
  if (absl::Status s = farcall::log::InitFromFlags("farcall-router"); !s.ok()) {
    std::fprintf(stderr, "farcall-router: %s\n", s.ToString().c_str());
    return 2;
  }

  farcall::router::RouterServer::Options options;
  options.listen = absl::GetFlag(FLAGS_listen);
  options.agents = absl::GetFlag(FLAGS_agents);
  for (const std::string& source : options.agents) {
    if (absl::Status s = farcall::router::CheckAgentSource(source); !s.ok()) {
      farcall::log::Error(s.ToString());
      return 2;
    }
  }
  options.max_call_bytes = absl::GetFlag(FLAGS_max_call_bytes);
  options.metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  options.tenant_max_calls = absl::GetFlag(FLAGS_tenant_max_calls);
  options.metrics_max_tenants = absl::GetFlag(FLAGS_metrics_max_tenants);
  if (options.tenant_max_calls < 0 || options.metrics_max_tenants < 0) {
    farcall::log::Error("--tenant_max_calls and --metrics_max_tenants must not be negative.");
    return 2;
  }
  options.pool.probe_interval = absl::Milliseconds(absl::GetFlag(FLAGS_probe_interval_ms));
  absl::StatusOr<farcall::GrpcServerLimits> grpc_limits = farcall::GrpcServerLimitsFromFlags();
  absl::StatusOr<farcall::HeaderLimits> limits = farcall::HeaderLimitsFromFlags();
  for (const absl::Status& s : {grpc_limits.status(), limits.status()}) {
    if (!s.ok()) {
      farcall::log::Error(s.ToString());
      return 2;
    }
  }
  options.grpc_limits = *grpc_limits;
  options.header_limits = *limits;
  // Shares the router's tokens and TLS files: a reload here is the
  // router's too.
  farcall::ReloadableFiles reloadable;
  std::string callers;  // who may call, for the start-up line
  absl::Status bad = [&]() -> absl::Status {
    FARCALL_ASSIGN_OR_RETURN(farcall::ServerSecurity security,
                             farcall::ServerSecurityFromFlags(farcall::ServerRole::kRouter));
    FARCALL_ASSIGN_OR_RETURN(callers, CallerAuthentication(security));
    reloadable = security.reloadable();
    options.credentials = std::move(security.credentials);
    options.tokens = std::move(security.tokens);
    options.signer = std::move(security.signer);
    options.metrics_access = std::move(security.metrics_access);
    FARCALL_ASSIGN_OR_RETURN(options.pool.credentials,
                             farcall::ChannelCredentials({absl::GetFlag(FLAGS_agent_tls_cert),
                                                          absl::GetFlag(FLAGS_agent_tls_key),
                                                          absl::GetFlag(FLAGS_agent_tls_ca)}));
    options.pool.tls_server_name = absl::GetFlag(FLAGS_agent_tls_server_name);
    const std::string token_file = absl::GetFlag(FLAGS_agent_token_file);
    if (!token_file.empty()) {
      FARCALL_ASSIGN_OR_RETURN(options.agent_token, farcall::ReadTokenFile(token_file));
      options.pool.authorization = absl::StrCat(farcall::kBearerPrefix, options.agent_token);
    }
    return absl::OkStatus();
  }();
  if (bad.ok() && options.signer.has_value() &&
      options.header_limits.max_name_bytes >
          static_cast<int64_t>(farcall::kMaxCapabilityFieldBytes)) {
    // A capability names the handler in at most that many bytes: a longer
    // name would be forwarded with none.
    bad = absl::InvalidArgumentError(absl::StrCat(
        "--max_name_bytes=", options.header_limits.max_name_bytes, " is over ",
        farcall::kMaxCapabilityFieldBytes,
        ", the longest handler name a capability can name (--capability_signing_key_file)."));
  }
  if (!bad.ok()) {
    farcall::log::Error(bad.ToString());
    return 2;
  }
  farcall::ExportReloadMetrics();
  auto router = farcall::router::RouterServer::Start(options);
  if (!router.ok()) {
    farcall::log::Error(router.status().ToString());
    return 1;
  }
  int live = 0;
  const farcall::v1::ListAgentsResponse agents = (*router)->pool().List();
  for (const auto& a : agents.agents()) {
    live += a.health() == farcall::v1::AgentEntry::SERVING;
  }
  farcall::log::Info(absl::StrCat(
      "farcall-router ", farcall::Version(), " serving on port ", (*router)->port(),
      (*router)->metrics_port() > 0
          ? absl::StrCat(", metrics and status page on port ", (*router)->metrics_port())
          : std::string(", no metrics"),
      "; ", live, " of ", agents.agents_size(), " agent(s) live; ", callers,
      "; flags: ", farcall::log::NonDefaultFlags()));
  farcall::ReportReady(absl::GetFlag(FLAGS_ready_fd), (*router)->port(), (*router)->metrics_port());

  std::string sig = farcall::WaitForTerminationSignal(
      [&reloadable](bool hangup) { farcall::ReloadFiles(reloadable, hangup); });
  farcall::log::Info(absl::StrCat(sig,
                                  " received: draining (NOT_SERVING, no new calls), "
                                  "then shutting down"));
  (*router)->Shutdown();
  farcall::RefusalAudit::FlushProcessAudit();
  farcall::log::Info("stopped");
  // Everything is stopped and flushed; skip gRPC's library teardown at exit,
  // which waits over a second for its internal threads.
  std::fflush(nullptr);
  std::_Exit(0);
}
