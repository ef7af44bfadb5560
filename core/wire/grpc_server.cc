#include "core/wire/grpc_server.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"

namespace farcall {

absl::StatusOr<RunningServer> StartGrpcServer(
    const std::string& listen, grpc::Service* service, int max_message_bytes,
    absl::string_view who, std::shared_ptr<grpc::ServerCredentials> credentials) {
  grpc::EnableDefaultHealthCheckService(true);
  RunningServer r;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(
      listen, credentials != nullptr ? credentials : grpc::InsecureServerCredentials(), &r.port);
  builder.RegisterService(service);
  builder.SetMaxReceiveMessageSize(max_message_bytes);
  builder.SetMaxSendMessageSize(max_message_bytes);
  r.server = builder.BuildAndStart();
  if (r.server == nullptr || r.port == 0) {
    return absl::UnavailableError(absl::StrCat(
        who, " could not listen on ", listen, " (address in use, or not a HOST:PORT)."));
  }
  r.server->GetHealthCheckService()->SetServingStatus(true);
  return r;
}

void StopGrpcServer(grpc::Server* server) {
  if (server == nullptr) return;
  server->GetHealthCheckService()->SetServingStatus(false);
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  server->Wait();
}

}  // namespace farcall
