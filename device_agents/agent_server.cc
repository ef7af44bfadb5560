// AgentServer (agent_service.h): assembles the agent from its options (the
// backend, handlers, tokens, shared memory, UCX, the worker pool and the
// watchdog) and serves the reactors of agent_service.cc.
#include <sys/random.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "core/cgroup_limits.h"
#include "core/log.h"
#include "core/metrics.h"
#include "core/shm_protocol.h"
#include "core/status_macros.h"
#include "core/version.h"
#include "core/wire/grpc_server.h"
#include "device_agents/agent_metrics.h"
#include "device_agents/agent_reactors.h"
#include "device_agents/builtins/builtin_handlers.h"
#include "device_agents/plugin_loader.h"
#include "device_agents/ucx_exchange.h"
#include "grpcpp/health_check_service_interface.h"

namespace farcall::agent {

std::string DefaultAgentId(absl::string_view platform, int port) {
  // The pod's name in Kubernetes (the downward API sets POD_NAME), else
  // the host's.
  std::string host;
  if (const char* pod = std::getenv("POD_NAME"); pod != nullptr && *pod != '\0') {
    host = pod;
  } else {
    char name[256] = {};
    if (gethostname(name, sizeof(name) - 1) == 0) host = name;
  }
  if (host.empty()) host = "host";
  // Replicas share a host name pattern and a port; the random part keeps
  // each process's id its own (a capability names one agent).
  unsigned char random[4] = {};
  if (getrandom(random, sizeof(random), 0) != static_cast<ssize_t>(sizeof(random))) {
    const uint64_t t = static_cast<uint64_t>(absl::ToUnixNanos(absl::Now())) ^ getpid();
    std::memcpy(random, &t, sizeof(random));
  }
  return absl::StrCat(platform, "-agent-", port, "-", host, "-",
                      absl::BytesToHexString(absl::string_view(
                          reinterpret_cast<const char*>(random), sizeof(random))));
}
namespace {

// The UCX data plane, when asked for and allowed (see Options::ucx).
absl::Status StartUcx(const AgentServer::Options& options, AgentState& state) {
  if (!options.ucx) return absl::OkStatus();
  // (The tokens are the state's by now.)
  const bool secured = options.tls || state.tokens.required();
  if (secured && !options.allow_ucx_with_tls) {
    log::Warning(
        "UCX is off: this agent requires TLS or tokens, and UCX has neither; pass "
        "--allow_ucx_with_tls when the fabric between clients and agents is trusted.");
    return absl::OkStatus();
  }
  if (!UcxBuiltIn()) return absl::FailedPreconditionError("UCX: this agent was built without UCX.");
  absl::StatusOr<std::shared_ptr<ucx::Worker>> w =
      StartUcxWorker({options.ucx_transports, options.ucx_max_endpoints});
  if (!w.ok()) {
    if (absl::IsInvalidArgument(w.status())) return w.status();  // a bad --ucx_transports
    log::Warning(absl::StrCat("UCX is off: ", w.status().message()));
    return absl::OkStatus();
  }
  state.ucx = *std::move(w);
  log::Info(absl::StrCat("UCX data plane on (transports: ",
                         options.ucx_transports.empty() ? "UCX's choice" : options.ucx_transports,
                         ")"));
  return absl::OkStatus();
}

}  // namespace

struct AgentServer::Impl {
  // First: it outlives the server, whose streams leave it in OnDone.
  std::unique_ptr<IdleWatchdog> watchdog;
  std::unique_ptr<metrics::MetricsServer> metrics;
  Shared shared;
  std::unique_ptr<grpc::Service> service;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
  absl::Duration drain;
  int scrape_hook = 0;  // sets the device memory gauges from shared.state
  ~Impl() {
    if (scrape_hook != 0) metrics::RemoveScrapeHook(scrape_hook);
    // The server and its streams go first; then the watchdog, whose thread
    // asks `shared` (the admission queue) whether others wait: it must stop
    // before `shared` goes (it used to outlive it, and read freed memory at
    // every shutdown that raced its next turn).
    server.reset();
    service.reset();
    watchdog.reset();
  }
};

AgentServer::AgentServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

AgentServer::~AgentServer() { Shutdown(); }

absl::StatusOr<std::unique_ptr<AgentServer>> AgentServer::Start(Options options) {
  auto impl = std::make_unique<Impl>();
  AgentState& state = impl->shared.state;
  state.config = options.config;
  if (state.config.max_inflight_bytes <= 0) {
    // A container's memory limit, not only the host's memory.
    state.config.max_inflight_bytes = MemoryLimitBytes() / 4 * 3;
  }
  state.admission = std::make_unique<Admission>(state.config.max_inflight_bytes);
  state.ledger = std::make_unique<CallLedger>(state.config.ledger);
  if (state.config.residents.max_bytes <= 0) {
    state.config.residents.max_bytes = state.config.max_inflight_bytes / 2;
  }
  state.residents = std::make_unique<ResidentStore>(state.config.residents, state.admission.get());
  state.caller_slots = std::make_unique<CallerSlots>();
  FARCALL_ASSIGN_OR_RETURN(state.backend, OpenBackend(state.config.platform, state.config.backend));
  if (!state.config.faults.empty()) {
    log::Warning("injecting device faults (--inject_faults=" + state.config.faults.ToString() +
                 "): calls will fail on purpose");
    InjectFaults(state.config.faults, state.backend, &state.calls_ended);
  }
  ExportAgentSeries();
  builtins::MaxSleepMs() = absl::ToInt64Milliseconds(state.config.max_sleep);
  metrics::ExportBuildInfo("farcall-agent", Version());
  Metrics().budget.With({}).Set(static_cast<double>(state.config.max_inflight_bytes));
  Metrics().draining.With({}).Set(0);
  impl->scrape_hook = metrics::AddScrapeHook([&backend = state.backend] {
    for (const auto& d : backend.devices) {
      const std::string device = absl::StrCat(d->ordinal());
      Metrics().device_used.With({device}).Set(static_cast<double>(d->memory_used_bytes()));
      Metrics().device_total.With({device}).Set(static_cast<double>(d->memory_bytes()));
    }
  });
  for (const FarcallHandlerDef& def : state.backend.builtin_handlers) {
    FARCALL_RETURN_IF_ERROR(state.registry.Register(def, "builtin"));
  }
  for (const std::string& path : options.plugins) {
    FARCALL_RETURN_IF_ERROR(LoadPlugin(path, state.registry));
  }
  for (RegisteredHandler& h : options.in_process_handlers) {
    FARCALL_RETURN_IF_ERROR(state.registry.RegisterInProcess(std::move(h)));
  }
  state.tokens = std::move(options.tokens);
  state.tenant_labels.set_max(options.metrics_max_tenants);
  state.tenant_labels.Seed(state.tokens.principals());
  state.verifier = std::move(options.verifier);
  for (const std::string& name : options.disabled_handlers) {
    FARCALL_RETURN_IF_ERROR(state.registry.Disable(name));
  }
  if (!options.metrics_listen.empty()) {
    FARCALL_ASSIGN_OR_RETURN(
        impl->metrics,
        metrics::MetricsServer::Start(options.metrics_listen, {}, options.metrics_access));
  }
  // Every platform: a device agent copies a call's tensors between the
  // client's region and device memory on the call's stream (AgentCall).
  if (!options.shm_socket.empty()) {
    // A random name: unique even for agents in one network namespace but
    // separate PID namespaces (containers of one pod), and never found by a
    // client whose "local" target is really a forwarded remote agent.
    std::string address = options.shm_socket == "auto"
                              ? absl::StrCat("@farcall-agent-", shm::NewToken().substr(0, 16))
                              : options.shm_socket;
    ShmService::Options shm_options;
    shm_options.allowed_uids = options.shm_allow_uids;
    shm_options.max_bytes_per_connection = options.shm_max_bytes;
    FARCALL_ASSIGN_OR_RETURN(state.shm, ShmService::Start(address, shm_options));
  }
  FARCALL_RETURN_IF_ERROR(StartUcx(options, state));
  // One per core this process may use: a container's CPU limit, not its
  // node's cores.
  const int workers = options.workers > 0 ? options.workers : CpuLimit();
  const int spares = options.tenant_spare_workers < 0 ? workers : options.tenant_spare_workers;
  impl->shared.pool = std::make_unique<WorkerPool>(workers, 0, nullptr, spares);
  impl->shared.device_steps_on_workers = state.config.platform != Platform::kCpu;
  if (options.idle_limits.idle > absl::ZeroDuration() ||
      options.idle_limits.stall > absl::ZeroDuration() ||
      options.idle_limits.max_call < absl::InfiniteDuration()) {
    Admission* admission = state.admission.get();
    impl->watchdog = std::make_unique<IdleWatchdog>(
        options.idle_limits, [admission] { return admission->waiting_for_budget() > 0; });
    impl->shared.watchdog = impl->watchdog.get();
  }
  impl->service = NewAgentService(impl->shared);

  FARCALL_ASSIGN_OR_RETURN(RunningServer running,
                           StartGrpcServer(
                               options.listen, impl->service.get(),
                               [&] {
                                 GrpcServerLimits limits = options.grpc_limits;
                                 limits.max_message_bytes =
                                     static_cast<int>(state.config.max_message_bytes);
                                 return limits;
                               }(),
                               "farcall-agent", options.credentials));
  impl->server = std::move(running.server);
  impl->port = running.port;
  if (state.shm != nullptr) state.shm->set_server_port(running.port);
  impl->drain = options.grpc_limits.drain;
  // A sticky device error: stop being picked by routers; serve nothing new.
  grpc::Server* server = impl->server.get();
  state.SetDeviceFailureHandler([server](const absl::Status& error) {
    log::Error(absl::StrCat("device failed, now NOT_SERVING: ", error.ToString()));
    server->GetHealthCheckService()->SetServingStatus(false);
  });
  state.set_agent_id(state.config.agent_id.empty()
                         ? DefaultAgentId(PlatformName(state.config.platform), impl->port)
                         : state.config.agent_id);
  return std::unique_ptr<AgentServer>(new AgentServer(std::move(impl)));
}

int AgentServer::port() const { return impl_->port; }

int AgentServer::metrics_port() const { return impl_->metrics ? impl_->metrics->port() : 0; }

const AgentState& AgentServer::state() const { return impl_->shared.state; }

void AgentServer::Shutdown() {
  if (impl_->server == nullptr) return;
  Metrics().draining.With({}).Set(1);
  // Resident arrays: while any is left, the agent takes the calls that name
  // them (and only those), so that their clients can move them (Get, Put
  // elsewhere, Delete), until --drain_seconds runs out.
  ResidentStore* residents = impl_->shared.state.residents.get();
  if (const int64_t n = residents != nullptr ? residents->count() : 0; n > 0) {
    log::Warning(absl::StrCat(
        "draining with ", n, " resident arrays (", residents->bytes(),
        " bytes) held: calls that name them are served until their clients delete them or "
        "--drain_seconds=",
        absl::ToDoubleSeconds(impl_->drain),
        " runs out; then they are lost (their clients get NOT_FOUND, resident lost)"));
  }
  Shared& shared = impl_->shared;
  const absl::Duration drain = impl_->drain;
  const int cut = StopGrpcServer(
      impl_->server.get(), shared.gate, drain, absl::InfiniteDuration(),
      [residents] { return residents != nullptr && residents->count() > 0; },
      [&shared, drain] { shared.live.CutAll(DrainCutAnswers("agent", drain)); });
  if (cut > 0) {
    log::Warning(DrainCutLine(cut, impl_->drain));
    // The cut calls were answered; their handlers were told to stop, and the
    // agent's state stays until they have returned.
    shared.gate.DrainFor(absl::InfiniteDuration());
  }
  if (const int64_t n = residents != nullptr ? residents->count() : 0; n > 0) {
    log::Warning(absl::StrCat("the drain ended with ", n,
                              " resident arrays still held: they are lost with this agent"));
  }
  impl_->server.reset();
  impl_->shared.pool.reset();  // runs what is queued, then joins
}

}  // namespace farcall::agent
