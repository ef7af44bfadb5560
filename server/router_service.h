// The router's gRPC server: Router.Execute, Router.Call, ListAgents and
// grpc.health.v1.
//
// Layers:
//   1. RouterServer: the gRPC server, the AgentPool and the prober.
//   2. Reactors (router_service.cc): parse only the call header, answer the
//      contract's errors themselves, pick an agent, then forward raw frames
//      with one read and one write in flight per side. A call whose agent
//      cannot be reached before it accepted the call is retried on another.
//
//   auto router = RouterServer::Start(options);
//   (*router)->port();
#ifndef FARCALL_SERVER_ROUTER_SERVICE_H_
#define FARCALL_SERVER_ROUTER_SERVICE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/capability.h"
#include "core/http_server.h"
#include "core/tokens.h"
#include "core/wire/grpc_server.h"
#include "core/wire/header_limits.h"
#include "grpcpp/security/server_credentials.h"
#include "server/agent_pool.h"

namespace farcall::router {

class RouterServer {
 public:
  struct Options {
    std::string listen = "127.0.0.1:0";
    std::vector<std::string> agents;
    int64_t max_call_bytes = int64_t{16} << 30;
    // The gRPC server's limits (message size, streams per connection,
    // memory); what one call header may declare.
    GrpcServerLimits grpc_limits;
    HeaderLimits header_limits;
    // TLS for callers (null: plaintext) and the tokens they need (empty:
    // none). The hop to agents: pool.credentials, and agent_token, the
    // router's own token (empty: each caller's is passed on).
    std::shared_ptr<grpc::ServerCredentials> credentials;
    TokenTable tokens;
    std::string agent_token;
    // Mints capabilities for agents (core/capability.h): Resolve returns
    // one per agent, and forwarded calls carry one, naming the caller. None:
    // no capabilities (clients send agents their tokens).
    std::optional<CapabilitySigner> signer;
    AgentPool::Options pool;
    // HOST:PORT for Prometheus' /metrics; empty: not served.
    std::string metrics_listen;
    // TLS and who may read it (--metrics_tls ...; by default plain, open).
    HttpServer::Access metrics_access;
    // Calls one tenant may have in flight through the router (0: no
    // limit; a tokens-file line's max_calls= wins), and tenants with a
    // `tenant` label value of their own.
    int64_t tenant_max_calls = 0;
    int metrics_max_tenants = 64;
  };

  // Probes every agent once, then starts serving and probing.
  static absl::StatusOr<std::unique_ptr<RouterServer>> Start(Options options);
  ~RouterServer();

  int port() const;
  // The /metrics port, or 0 when metrics are not served.
  int metrics_port() const;
  AgentPool& pool();
  void Shutdown();

 private:
  struct Impl;
  explicit RouterServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace farcall::router

#endif  // FARCALL_SERVER_ROUTER_SERVICE_H_
