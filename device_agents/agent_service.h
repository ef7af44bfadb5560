// The agent's gRPC server: Agent.Execute (streamed), Agent.Call (unary),
// Agent.Describe and grpc.health.v1, on gRPC's callback API.
//
// Layers:
//   1. AgentServer (agent_server.cc): owns the gRPC server, the worker pool
//      and AgentState.
//   2. Reactors (agent_service.cc): move frames between gRPC and AgentCall,
//      one read and one write in flight, and run handlers on the pool.
//   3. AgentCall: the call itself, shared by Execute and Call.
//
//   auto server = AgentServer::Start(options);   // StatusOr
//   (*server)->port();                           // the port actually bound
//   (*server)->Shutdown();
#ifndef FARCALL_DEVICE_AGENTS_AGENT_SERVICE_H_
#define FARCALL_DEVICE_AGENTS_AGENT_SERVICE_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/http_server.h"
#include "core/wire/grpc_server.h"
#include "core/wire/protocol.h"
#include "core/wire/server_tls.h"
#include "device_agents/agent_call.h"
#include "device_agents/idle_watchdog.h"
#include "grpcpp/security/server_credentials.h"

namespace farcall::agent {

// The id an agent reports when --agent_id is not given:
// PLATFORM-agent-PORT-HOST-RANDOM, HOST being $POD_NAME (Kubernetes' downward
// API) or the host name, RANDOM 8 hex digits: replicas that share a port
// (every pod of a Deployment) still each have their own.
std::string DefaultAgentId(absl::string_view platform, int port);

class AgentServer {
 public:
  struct Options {
    std::string listen = "127.0.0.1:0";
    AgentConfig config;
    int workers = 0;  // 0: one per core
    // Threads started beyond `workers` for a tenant whose handler waits
    // while other tenants' calls hold every worker (-1: as many as
    // `workers`; 0: none).
    int tenant_spare_workers = -1;
    // Tenants with a `tenant` label value of their own in metrics.
    int metrics_max_tenants = 64;
    std::vector<std::string> plugins;
    // HOST:PORT for Prometheus' /metrics; empty: not served.
    std::string metrics_listen;
    // TLS and who may read it (--metrics_tls ...; by default plain, open).
    HttpServer::Access metrics_access;
    TokenTable metrics_tokens;  // what metrics_access checks, reloaded
    // Unix socket for same-host shared memory: "auto" (an abstract socket
    // with a random name), "@name", a path, or empty for none. Offered
    // on platforms whose memory the host addresses (cpu).
    std::string shm_socket = "auto";
    // Users besides the agent's own whose processes may use shared memory.
    std::vector<uint32_t> shm_allow_uids;
    // Bytes one shared-memory client connection may have registered.
    uint64_t shm_max_bytes = uint64_t{64} << 30;
    // Move tensors over UCX for calls that ask (builds with UCX, cpu
    // agents). UCX authenticates and encrypts nothing: with TLS or tokens
    // it stays off unless `allow_ucx_with_tls` says the fabric is trusted.
    bool ucx = false;
    bool allow_ucx_with_tls = false;
    // UCX transports, in UCX_TLS's syntax ("tcp", "rc,sm"); empty: UCX's
    // own choice.
    std::string ucx_transports;
    // UCX endpoints open at most (ucx::Worker::Options::max_endpoints).
    size_t ucx_max_endpoints = 1024;
    // Handlers of the program that embeds the agent (RegisteredHandler's
    // `invoke` and `pool`), registered after the built-ins and plugins.
    std::vector<RegisteredHandler> in_process_handlers;
    // Handlers not to serve (the test built-ins sleep and fail, say).
    std::vector<std::string> disabled_handlers;
    // A call whose client sends nothing (after its header or a chunk), or
    // takes no results, for `idle` is ended with DEADLINE_EXCEEDED and its
    // memory freed; so is one that holds budget other calls wait for, after
    // `stall`. Zero: never.
    IdleLimits idle_limits;
    // The gRPC server's connection limits (its message size is
    // config.max_message_bytes).
    GrpcServerLimits grpc_limits;
    // TLS (null: plaintext) and bearer tokens (empty: none needed).
    std::shared_ptr<grpc::ServerCredentials> credentials;
    bool tls = false;  // `credentials` are TLS (it turns UCX off, see `ucx`)
    TokenTable tokens;
    // The TLS files `credentials` follow (core/wire/server_tls.h); the
    // server keeps none of it: whoever reloads (agent_main) takes it.
    std::shared_ptr<ServerTlsFiles> tls_files;
    // Verifies the capabilities a router mints (core/capability.h); none:
    // capabilities are ignored and callers need tokens (if any).
    std::optional<CapabilityVerifier> verifier;
  };

  // Opens the platform's devices, loads plugins, binds and starts serving.
  static absl::StatusOr<std::unique_ptr<AgentServer>> Start(Options options);
  ~AgentServer();

  int port() const;
  // The /metrics port, or 0 when metrics are not served.
  int metrics_port() const;
  const AgentState& state() const;
  // Stops accepting calls, cancels the ones in flight after a short grace.
  void Shutdown();

 private:
  struct Impl;
  explicit AgentServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace farcall::agent

#endif  // FARCALL_DEVICE_AGENTS_AGENT_SERVICE_H_
