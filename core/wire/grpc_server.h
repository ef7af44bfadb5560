// Starting and stopping the gRPC servers of the farcall binaries, the same
// way everywhere: standard health service on, port 0 allowed, clear errors.
#ifndef FARCALL_CORE_WIRE_GRPC_SERVER_H_
#define FARCALL_CORE_WIRE_GRPC_SERVER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/server.h"

namespace farcall {

struct RunningServer {
  std::unique_ptr<grpc::Server> server;
  int port = 0;  // the port actually bound
};

// Serves `service` on `listen` (HOST:PORT, port 0 picks one) with
// grpc.health.v1 reporting SERVING, over `credentials` (null: plaintext;
// core/wire/tls.h makes TLS ones). `max_message_bytes` < 0: unlimited.
// UNAVAILABLE naming `who` and the address when it cannot bind.
absl::StatusOr<RunningServer> StartGrpcServer(
    const std::string& listen, grpc::Service* service, int max_message_bytes,
    absl::string_view who, std::shared_ptr<grpc::ServerCredentials> credentials = nullptr);

// Reports NOT_SERVING, lets calls in flight finish for up to two seconds,
// then cancels the rest and waits. Null is a no-op.
void StopGrpcServer(grpc::Server* server);

}  // namespace farcall

#endif  // FARCALL_CORE_WIRE_GRPC_SERVER_H_
