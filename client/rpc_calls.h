// The two gRPC shapes a call takes (the wire contract's Call and Execute),
// over the generic stub so that tensors go as raw frames and never through
// protobuf messages. The lowest layer of the client: a call comes here
// prepared (call_codec.h), with its target's stub, method and credentials
// chosen (target_channel.h). Internal to client/.
#ifndef FARCALL_CLIENT_RPC_CALLS_H_
#define FARCALL_CLIENT_RPC_CALLS_H_

#include <chrono>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/call_codec.h"
#include "farcall/call_types.h"
#include "grpcpp/client_context.h"
#include "grpcpp/generic/generic_stub.h"

namespace farcall::ucx {
class Worker;
}

namespace farcall::client_internal {

std::chrono::system_clock::time_point DeadlineAfter(absl::Duration d);

// What a call presents to its target: the caller's token ("Bearer TOKEN"),
// or, to an agent a router named, the capability the router minted for
// this caller there (then never the token).
struct CallCredentials {
  std::string authorization;
  std::string capability;
};
void AddCredentials(grpc::ClientContext& ctx, const CallCredentials& c);

// A failure of a call to an agent a router named (PreparedCall::direct)
// that never reached the agent (NeverReachedAgent) is marked, so that the
// lookaside may send the call elsewhere; it clears the mark before the
// caller sees the status.
void MarkNotDelivered(absl::Status& s);
bool NotDelivered(const absl::Status& s);
void ClearNotDelivered(absl::Status& s);

// How a unary call's tensors travel over UCX: the process's worker and the
// agent's address (a null worker: not over UCX).
struct UcxRoute {
  ucx::Worker* worker = nullptr;
  std::string agent_address;
};

// What every call of one target shares: its stub, the method (a path of
// core/wire/protocol.h), and the client's closer (Client::Close stops the
// call as CallOptions::stop does).
struct RpcTarget {
  grpc::GenericStub* stub = nullptr;
  std::string method;
  const CallStop* closer = nullptr;
};

// Starts a unary Call (one frame each way; with `ucx`, only the header, and
// the tensors over UCX) and returns at once; `done` runs once, on a gRPC
// thread, after gRPC has let go of the caller's memory.
void StartUnaryCall(const RpcTarget& target, PreparedCall call, const CallOptions& options,
                    const CallCredentials& credentials, CallCallback done,
                    const UcxRoute& ucx = {});
// Starts an Execute stream: request frames of options.chunk_bytes out, one at
// a time, response frames in. As StartUnaryCall otherwise.
void StartStreamCall(const RpcTarget& target, PreparedCall call, const CallOptions& options,
                     const CallCredentials& credentials, CallCallback done);
// A unary Call that blocks the calling thread, on a completion queue of its
// own: no gRPC thread takes part, so no hand-off to one and back, which is
// most of a small call's latency.
absl::StatusOr<CallResult> BlockingUnaryCall(const RpcTarget& target, const PreparedCall& call,
                                             const CallOptions& options,
                                             const CallCredentials& credentials);
// Runs `start`'s asynchronous call and waits for its end.
absl::StatusOr<CallResult> Await(const std::function<void(CallCallback)>& start);

}  // namespace farcall::client_internal

#endif  // FARCALL_CLIENT_RPC_CALLS_H_
