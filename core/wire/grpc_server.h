// Starting and stopping the gRPC servers of the farcall binaries, the same
// way everywhere: standard health service on, port 0 allowed, clear errors.
#ifndef FARCALL_CORE_WIRE_GRPC_SERVER_H_
#define FARCALL_CORE_WIRE_GRPC_SERVER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "core/drain_gate.h"
#include "core/live_calls.h"
#include "grpcpp/server.h"

namespace farcall {

struct RunningServer {
  std::unique_ptr<grpc::Server> server;
  int port = 0;  // the port actually bound
};

// Transport limits of one server, so that no client holds more of it than
// these allow.
struct GrpcServerLimits {
  int max_message_bytes = -1;         // < 0: unlimited
  int max_concurrent_streams = 1024;  // calls in flight on one connection
  // Bytes gRPC itself may hold for all connections (buffers, not tensors
  // placed by the servers); 0: gRPC's default.
  int64_t memory_bytes = 0;
  // A connection older than this gets GOAWAY (clients reconnect); calls on
  // it may run `max_connection_age_grace` more, then it is closed. Zero: no
  // limit.
  absl::Duration max_connection_age = absl::ZeroDuration();
  absl::Duration max_connection_age_grace = absl::ZeroDuration();
  // At shutdown, how long calls in flight may still run (StopGrpcServer).
  absl::Duration drain = absl::Seconds(30);
};

// Serves `service` on `listen` (HOST:PORT, port 0 picks one) with
// grpc.health.v1 reporting SERVING, over `credentials` (null: plaintext;
// core/wire/security.h makes TLS ones), within `limits`.
// UNAVAILABLE naming `who` and the address when it cannot bind.
// Clients that ping more often than every 10 s without calls in flight are
// sent away (keepalive enforcement).
absl::StatusOr<RunningServer> StartGrpcServer(
    const std::string& listen, grpc::Service* service, const GrpcServerLimits& limits,
    absl::string_view who, std::shared_ptr<grpc::ServerCredentials> credentials = nullptr);

// Drains: reports NOT_SERVING (routers stop picking it), closes `gate` so
// that the server's calls refuse new work, waits up to `drain` for the calls
// in flight, then stops: what still runs is cancelled and connections are
// closed. Null is a no-op.
//
// With `goaway_after` shorter than `drain` (routers), clients are also told
// to go elsewhere: once that long has passed with calls still in flight,
// the server sends GOAWAY on every connection and stops listening, so that
// clients open new connections (to another address of their target, or
// through a Service to another pod) while the calls in flight finish.
// Until then health checks see NOT_SERVING and new calls the gate's
// refusal, which clients send again (client.cc, kRouterRetryWaits).
// Returns how many calls were still in flight when the drain ended (cut).
// `held`: as DrainFor's (an agent holding resident arrays drains until its
// clients have moved them).
// `cut_calls`: run when the drain ends with calls in flight, before gRPC
// cancels them, so that the server answers each itself (DrainCutError);
// they are given up to a second to leave.
int StopGrpcServer(grpc::Server* server, DrainGate& gate, absl::Duration drain,
                   absl::Duration goaway_after = absl::InfiniteDuration(),
                   const std::function<bool()>& held = nullptr,
                   const std::function<void()>& cut_calls = nullptr);

// The warning line for `cut` calls cut by a drain of `drain` (none: "").
std::string DrainCutLine(int cut, absl::Duration drain);

// The answers of `who` ("agent" or "router") to the calls its drain of
// `drain` cut: UNAVAILABLE either way; marked ErrorReason::kDrainCut for a
// call whose handler may have run (in part: only a call without side effects
// is sent again), kAgentDraining or kRouterDraining for one that had not
// reached its handler (sent elsewhere).
LiveCalls::Answers DrainCutAnswers(absl::string_view who, absl::Duration drain);

}  // namespace farcall

#endif  // FARCALL_CORE_WIRE_GRPC_SERVER_H_
