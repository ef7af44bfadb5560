#include "device_agents/agent_flags.h"

#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "core/call_validation.h"
#include "core/capability.h"
#include "core/limit_flags.h"
#include "core/log.h"
#include "core/platform.h"
#include "core/process.h"
#include "core/security_flags.h"
#include "core/status_macros.h"
#include "core/version.h"
#include "device_agents/fault_injection.h"
#include "device_agents/ucx_exchange.h"

ABSL_FLAG(std::string, platform, "cpu", "cpu, cuda, rocm or oneapi");
ABSL_FLAG(std::string, listen, "127.0.0.1:50051", "HOST:PORT to serve on; port 0 picks a free one");
ABSL_FLAG(std::vector<std::string>, plugins, {}, "comma-separated handler plugins (.so) to load");
ABSL_FLAG(std::string, agent_id, "",
          "id reported to clients and named by capabilities; unique per agent (default: "
          "PLATFORM-agent-PORT-HOST-RANDOM, HOST being $POD_NAME or the host name)");
ABSL_FLAG(int64_t, max_call_bytes, int64_t{4} << 30,
          "largest call, args plus non-aliased results, in bytes");
ABSL_FLAG(int64_t, max_inflight_bytes, 0,
          "tensor bytes all calls in flight may hold (0: 3/4 of the memory the host or "
          "the container's cgroup allows)");
ABSL_FLAG(int64_t, response_chunk_bytes, 1 << 20, "result bytes per streamed response message");
ABSL_FLAG(std::string, metrics_listen, "",
          "HOST:PORT to serve Prometheus /metrics on; a bare PORT binds loopback only "
          "(empty: off)");
ABSL_FLAG(std::vector<std::string>, transports,
          (farcall::agent::UcxBuiltIn() ? std::vector<std::string>{"grpc", "shm", "ucx"}
                                        : std::vector<std::string>{"grpc", "shm"}),
          "how calls' tensors may travel: grpc (always; calls themselves are gRPC), shm "
          "(same-host shared memory; device agents copy between it and device memory) and ucx "
          "(UCX between hosts, builds with UCX; device agents through host memory); default: all "
          "that were built");
ABSL_FLAG(std::string, ucx_transports, "",
          "UCX transports to use, in UCX_TLS's syntax (tcp; rc,sm; ...); empty: UCX's choice");
ABSL_FLAG(int64_t, ucx_max_endpoints, 1024,
          "UCX endpoints (callers' workers) open at most; past it, with every one in use, a "
          "new caller's UCX call fails before its handler runs (auto sends it over gRPC)");
ABSL_FLAG(bool, allow_ucx_with_tls, false,
          "offer UCX even when TLS or tokens are required: UCX authenticates and encrypts "
          "nothing, so only on a fabric where every peer is trusted");
ABSL_FLAG(std::string, shm_socket, "auto",
          "same-host shared memory: auto, @abstract-name, a socket path, or empty for none");
ABSL_FLAG(std::vector<std::string>, shm_allow_uids, {},
          "uids besides the agent's own whose processes may use its shared memory");
ABSL_FLAG(int64_t, shm_max_bytes, int64_t{64} << 30,
          "most bytes of shared memory one client connection may have registered at once");
ABSL_FLAG(int, workers, 0,
          "handler threads (0: one per core this process may use: the container's CPU limit "
          "when it has one)");
ABSL_FLAG(int, metrics_max_tenants, 64,
          "tenants (the tokens file's first, then callers as they come) whose calls metrics "
          "label with their own `tenant` value; the rest are labelled 'other'");
ABSL_FLAG(int, tenant_spare_workers, -1,
          "handler threads started beyond --workers, each for a caller whose call waits while "
          "other callers' calls hold every worker; they leave when it is served (-1: as many "
          "as --workers; 0: none)");
ABSL_FLAG(std::vector<std::string>, devices, {},
          "device ordinals to serve, e.g. 0,1 (default: every device found)");
ABSL_FLAG(int64_t, staging_bytes, int64_t{256} << 20,
          "pinned host memory per device for staging copies, in bytes");
ABSL_FLAG(int64_t, staging_block_bytes, int64_t{4} << 20,
          "size of one staging block (one copy to or from the device)");
ABSL_FLAG(int64_t, graph_cache_bytes, int64_t{1} << 30,
          "device memory the captured graphs of command_buffer_compatible handlers may "
          "hold per device (cuda, rocm); the least recently used go first");
ABSL_FLAG(int64_t, graph_cache_entries, 1024,
          "the most captured graphs kept per device (cuda, rocm); the least recently used "
          "go first");
ABSL_FLAG(int64_t, resident_bytes, 0,
          "bytes all resident arrays (Client.put, results kept on the agent) may hold together; "
          "they stay in --max_inflight_bytes. 0: half of it");
ABSL_FLAG(int64_t, resident_bytes_per_principal, 0,
          "bytes one caller's (one token's) resident arrays may hold together; 0: "
          "--resident_bytes");
ABSL_FLAG(int64_t, resident_max_count, 65536, "resident arrays this agent holds at most");
ABSL_FLAG(absl::Duration, resident_ttl, absl::Hours(1),
          "how long a resident array stays after the last call that named it, when its "
          "client gave no ttl");
ABSL_FLAG(absl::Duration, call_id_ttl, absl::Minutes(10),
          "how long the call_ids of calls with side effects are remembered, so that a "
          "repeat never runs them twice");
ABSL_FLAG(int64_t, call_id_cache_bytes, int64_t{256} << 20,
          "bytes of answers kept to replay to repeats of calls with side effects");
ABSL_FLAG(int64_t, call_id_cache_bytes_per_tenant, 0,
          "the most of --call_id_cache_bytes one caller (a token, or the caller a router's "
          "capability names) may hold, its call_ids and kept answers together, so that no "
          "caller can fill it for the others (0: a quarter of --call_id_cache_bytes)");
ABSL_FLAG(int64_t, tenant_max_calls, 0,
          "the most calls one caller (a token, or the caller a router's capability names) may "
          "have in flight on this agent at once; more are refused with RESOURCE_EXHAUSTED "
          "(0: no limit)");
ABSL_FLAG(int64_t, tenant_max_bytes, 0,
          "the most bytes one caller's calls may hold of --max_inflight_bytes at once; its "
          "calls past it wait in its own queue, and one larger than it is refused with "
          "RESOURCE_EXHAUSTED (0: no limit but the budget)");
ABSL_FLAG(bool, list_devices, false,
          "print the platform's devices and exit: 0 when there is one, 1 when none");
ABSL_FLAG(absl::Duration, stream_idle_timeout, absl::Seconds(60),
          "end a call whose client sends nothing, or reads no results, for this long "
          "(e.g. 60s; 0: never)");
ABSL_FLAG(absl::Duration, stream_stall_timeout, absl::Seconds(5),
          "end a call that holds memory other calls wait for, and whose client sends or "
          "reads nothing for this long (0: only --stream_idle_timeout applies)");
ABSL_FLAG(double, min_stream_bytes_per_second, 1 << 20,
          "while other calls wait for memory, end a call that holds some and uploads or "
          "downloads slower than this, averaged over --stream_stall_timeout (0: no rate asked)");
ABSL_FLAG(absl::Duration, max_sleep, absl::Minutes(10),
          "the longest the built-in test handler sleep may be asked to sleep");
ABSL_FLAG(int64_t, inline_call_bytes, 64 << 10,
          "cpu: run unary calls of at most this many tensor bytes to handlers with "
          "FARCALL_TRAIT_QUICK (the built-ins but sleep) on the thread they arrived on, "
          "without a hand-off to a worker (0: never)");
ABSL_FLAG(double, max_call_seconds, 3600,
          "the longest a call may take, in every phase (upload, waiting for memory, run, "
          "download), whatever deadline its client set (or none)");
ABSL_FLAG(std::vector<std::string>, disable_handlers, {},
          "handlers not to serve, e.g. sleep,fail (the test built-ins) in production");
ABSL_FLAG(std::string, inject_faults, "",
          "for testing only: make the devices fail as real ones do, e.g. allocate=3 (every "
          "3rd allocation is out of memory), run=10 (every 10th launch fails), "
          "lose_device=5 (the 5th launch loses the device for good); exit_at=PHASE "
          "(header, upload, handler, result_first, result_mid, result_last) with "
          "exit_by=kill|term and exit_once=PATH: the first call to reach PHASE ends the process");
ABSL_FLAG(int, ready_fd, -1, "write the bound port to this file descriptor once serving");

namespace farcall::agent {

namespace {

// --devices, the staging pool and the graph cache.
absl::Status DeviceOptionsFromFlags(AgentServer::Options& options) {
  for (const std::string& d : absl::GetFlag(FLAGS_devices)) {
    int ordinal = -1;
    if (!absl::SimpleAtoi(d, &ordinal) || ordinal < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--devices takes device ordinals such as 0,1; got '", d, "'."));
    }
    options.config.backend.devices.push_back(ordinal);
  }
  options.config.backend.staging_bytes = absl::GetFlag(FLAGS_staging_bytes);
  options.config.backend.staging_block_bytes = absl::GetFlag(FLAGS_staging_block_bytes);
  options.config.backend.graph_cache_bytes = absl::GetFlag(FLAGS_graph_cache_bytes);
  options.config.backend.graph_cache_entries = absl::GetFlag(FLAGS_graph_cache_entries);
  if (options.config.backend.graph_cache_entries < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--graph_cache_entries must be positive; got ",
                                                   options.config.backend.graph_cache_entries,
                                                   "."));
  }
  if (options.config.backend.graph_cache_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--graph_cache_bytes must be 0 or positive; got ",
                     options.config.backend.graph_cache_bytes, "."));
  }
  return absl::OkStatus();
}

// --transports, shared memory and UCX.
absl::Status TransportOptionsFromFlags(AgentServer::Options& options) {
  options.shm_socket = absl::GetFlag(FLAGS_shm_socket);
  bool grpc = false, shm = false;
  for (const std::string& t : absl::GetFlag(FLAGS_transports)) {
    if (t == "grpc") {
      grpc = true;
    } else if (t == "shm") {
      shm = true;
    } else if (t == "ucx") {
      if (!UcxBuiltIn()) {
        return absl::InvalidArgumentError(
            "--transports=ucx: this agent was built without UCX; use grpc,shm.");
      }
      options.ucx = true;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "--transports takes grpc and shm (and ucx in builds with UCX); got '", t, "'."));
    }
  }
  if (!grpc) {
    return absl::InvalidArgumentError(
        "--transports must include grpc: calls are gRPC, and tensors too when no other "
        "transport serves them.");
  }
  if (!shm) options.shm_socket.clear();  // no same-host path offered
  options.ucx_transports = absl::GetFlag(FLAGS_ucx_transports);
  if (absl::GetFlag(FLAGS_ucx_max_endpoints) < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--ucx_max_endpoints must be at least 1; got ",
                                                   absl::GetFlag(FLAGS_ucx_max_endpoints), "."));
  }
  options.ucx_max_endpoints = static_cast<size_t>(absl::GetFlag(FLAGS_ucx_max_endpoints));
  options.allow_ucx_with_tls = absl::GetFlag(FLAGS_allow_ucx_with_tls);
  if (absl::GetFlag(FLAGS_shm_max_bytes) <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("--shm_max_bytes must be positive; got ",
                                                   absl::GetFlag(FLAGS_shm_max_bytes), "."));
  }
  options.shm_max_bytes = static_cast<uint64_t>(absl::GetFlag(FLAGS_shm_max_bytes));
  for (const std::string& u : absl::GetFlag(FLAGS_shm_allow_uids)) {
    uint32_t uid = 0;
    if (!absl::SimpleAtoi(u, &uid)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--shm_allow_uids takes numeric uids such as 1000,1001; got '", u, "'."));
    }
    options.shm_allow_uids.push_back(uid);
  }
  return absl::OkStatus();
}

// The limits on a call: its bytes, its time in every phase, idle and slow
// streams, headers, the budget.
absl::Status CallLimitsFromFlags(AgentServer::Options& options) {
  options.config.max_call_bytes = absl::GetFlag(FLAGS_max_call_bytes);
  FARCALL_ASSIGN_OR_RETURN(options.grpc_limits, GrpcServerLimitsFromFlags());
  options.config.max_message_bytes = options.grpc_limits.max_message_bytes;
  const double max_call_seconds = absl::GetFlag(FLAGS_max_call_seconds);
  if (!(max_call_seconds > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_call_seconds must be positive; got ", max_call_seconds, "."));
  }
  options.config.max_call_time = absl::Seconds(max_call_seconds);
  options.config.max_sleep = absl::GetFlag(FLAGS_max_sleep);
  options.config.inline_call_bytes = absl::GetFlag(FLAGS_inline_call_bytes);
  if (options.config.inline_call_bytes < 0 || options.config.inline_call_bytes > (16 << 20)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--inline_call_bytes must be 0 to 16777216; got ", options.config.inline_call_bytes, "."));
  }
  if (options.config.max_sleep < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--max_sleep must not be negative.");
  }
  options.idle_limits.idle = absl::GetFlag(FLAGS_stream_idle_timeout);
  options.idle_limits.stall = absl::GetFlag(FLAGS_stream_stall_timeout);
  if (options.idle_limits.idle < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--stream_idle_timeout must not be negative.");
  }
  if (options.idle_limits.stall < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--stream_stall_timeout must not be negative.");
  }
  options.idle_limits.min_bytes_per_second = absl::GetFlag(FLAGS_min_stream_bytes_per_second);
  if (!(options.idle_limits.min_bytes_per_second >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--min_stream_bytes_per_second must not be negative; got ",
                     options.idle_limits.min_bytes_per_second, "."));
  }
  options.idle_limits.max_call = options.config.max_call_time;
  FARCALL_ASSIGN_OR_RETURN(options.config.header_limits, HeaderLimitsFromFlags());
  options.config.max_inflight_bytes = absl::GetFlag(FLAGS_max_inflight_bytes);
  options.config.response_chunk_bytes = absl::GetFlag(FLAGS_response_chunk_bytes);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<AgentServer::Options> AgentOptionsFromFlags() {
  const std::string platform_name = absl::GetFlag(FLAGS_platform);
  std::optional<Platform> platform = ParsePlatform(platform_name);
  if (!platform) return UnsupportedPlatformError(platform_name);
  AgentServer::Options options;
  options.config.platform = *platform;
  options.config.agent_id = absl::GetFlag(FLAGS_agent_id);
  if (options.config.agent_id.size() > kMaxCapabilityFieldBytes) {
    // A router could sign no capability for it, and would forward calls
    // here under its own principal alone.
    return absl::InvalidArgumentError(absl::StrCat("--agent_id is ", options.config.agent_id.size(),
                                                   " bytes, over the ", kMaxCapabilityFieldBytes,
                                                   " a capability can name an agent in."));
  }
  FARCALL_RETURN_IF_ERROR(DeviceOptionsFromFlags(options));
  options.config.ledger.ttl = absl::GetFlag(FLAGS_call_id_ttl);
  options.config.residents.max_bytes = absl::GetFlag(FLAGS_resident_bytes);
  options.config.residents.max_bytes_per_principal =
      absl::GetFlag(FLAGS_resident_bytes_per_principal);
  options.config.residents.max_count = absl::GetFlag(FLAGS_resident_max_count);
  options.config.residents.default_ttl = absl::GetFlag(FLAGS_resident_ttl);
  if (options.config.residents.max_bytes < 0 ||
      options.config.residents.max_bytes_per_principal < 0 ||
      options.config.residents.max_count < 0 ||
      options.config.residents.default_ttl <= absl::ZeroDuration() ||
      options.config.residents.default_ttl > options.config.residents.max_ttl) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--resident_bytes, --resident_bytes_per_principal and --resident_max_count must not be "
        "negative, and --resident_ttl must be positive and at most ",
        absl::FormatDuration(options.config.residents.max_ttl), "."));
  }
  options.config.ledger.max_bytes = absl::GetFlag(FLAGS_call_id_cache_bytes);
  options.config.ledger.max_bytes_per_caller = absl::GetFlag(FLAGS_call_id_cache_bytes_per_tenant);
  options.config.tenant_max_calls = absl::GetFlag(FLAGS_tenant_max_calls);
  if (options.config.tenant_max_calls < 0) {
    return absl::InvalidArgumentError("--tenant_max_calls must not be negative (0: no limit).");
  }
  options.config.tenant_max_bytes = absl::GetFlag(FLAGS_tenant_max_bytes);
  if (options.config.tenant_max_bytes < 0) {
    return absl::InvalidArgumentError("--tenant_max_bytes must not be negative (0: no limit).");
  }
  if (options.config.ledger.ttl <= absl::ZeroDuration() || options.config.ledger.max_bytes < 0 ||
      options.config.ledger.max_bytes_per_caller < 0) {
    return absl::InvalidArgumentError(
        "--call_id_ttl must be positive, and --call_id_cache_bytes and "
        "--call_id_cache_bytes_per_tenant not negative.");
  }
  options.listen = absl::GetFlag(FLAGS_listen);
  options.plugins = absl::GetFlag(FLAGS_plugins);
  options.disabled_handlers = absl::GetFlag(FLAGS_disable_handlers);
  FARCALL_ASSIGN_OR_RETURN(ServerSecurity security, ServerSecurityFromFlags(ServerRole::kAgent));
  options.credentials = std::move(security.credentials);
  options.tls = security.tls;
  options.tls_files = security.tls_files;
  options.tokens = std::move(security.tokens);
  options.verifier = std::move(security.verifier);
  options.metrics_access = std::move(security.metrics_access);
  options.metrics_tokens = std::move(security.metrics_tokens);
  options.workers = absl::GetFlag(FLAGS_workers);
  options.tenant_spare_workers = absl::GetFlag(FLAGS_tenant_spare_workers);
  if (options.tenant_spare_workers < -1) {
    return absl::InvalidArgumentError(
        "--tenant_spare_workers must be -1 (as many as --workers), 0 (none) or more.");
  }
  options.metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  options.metrics_max_tenants = absl::GetFlag(FLAGS_metrics_max_tenants);
  if (options.metrics_max_tenants < 0) {
    return absl::InvalidArgumentError("--metrics_max_tenants must not be negative.");
  }
  FARCALL_RETURN_IF_ERROR(TransportOptionsFromFlags(options));
  FARCALL_RETURN_IF_ERROR(CallLimitsFromFlags(options));
  FARCALL_ASSIGN_OR_RETURN(options.config.faults,
                           ParseFaultPlan(absl::GetFlag(FLAGS_inject_faults)));
  return options;
}

std::optional<int> ListDevicesIfAsked(const AgentServer::Options& options) {
  if (!absl::GetFlag(FLAGS_list_devices)) return std::nullopt;
  auto backend = OpenBackend(options.config.platform, options.config.backend);
  if (!backend.ok()) {
    log::Error(backend.status().ToString());
    return 1;
  }
  const std::string name(PlatformName(options.config.platform));
  for (const auto& d : backend->devices) {
    std::printf("%s device %d: %s, %lld bytes\n", name.c_str(), d->ordinal(), d->name().c_str(),
                static_cast<long long>(d->memory_bytes()));
  }
  std::fflush(nullptr);
  return 0;
}

std::function<bool(const std::string&)> ServesHandler(const AgentServer& server) {
  return [&server](const std::string& handler) {
    const AgentState& state = server.state();
    return state.registry.Find(handler, PlatformName(state.config.platform)) != nullptr;
  };
}

void AnnounceServing(const AgentServer& server) {
  const AgentState& state = server.state();
  const std::string platform(PlatformName(state.config.platform));
  std::vector<std::string> names;
  for (const auto* h : state.registry.List(platform)) names.push_back(h->name);
  std::vector<std::string> devices;
  for (const auto& d : state.backend.devices) {
    devices.push_back(
        absl::StrCat(d->ordinal(), ": ", d->name(), " (", d->memory_bytes() >> 20, " MiB)"));
  }
  log::Info(absl::StrCat(
      "farcall-agent ", Version(), " ", state.agent_id(), " serving ", platform, " on port ",
      server.port(),
      server.metrics_port() > 0 ? absl::StrCat(", metrics on port ", server.metrics_port())
                                : std::string(", no metrics"),
      "; budget ", state.config.max_inflight_bytes >> 20, " MiB; ",
      state.tokens.required() ? absl::StrCat(state.tokens.size(), " token(s) loaded")
                              : std::string("no tokens required"),
      "; devices: [", absl::StrJoin(devices, "; "), "]; handlers: ", absl::StrJoin(names, ", "),
      "; flags: ", log::NonDefaultFlags()));
  ReportReady(absl::GetFlag(FLAGS_ready_fd), server.port(), server.metrics_port());
}

}  // namespace farcall::agent
