// The one conversion between absl::Status and grpc::Status. The codes have the
// same numbers; grpc_status.cc asserts it.
#ifndef FARCALL_CORE_WIRE_GRPC_STATUS_H_
#define FARCALL_CORE_WIRE_GRPC_STATUS_H_

#include "absl/status/status.h"
#include "grpcpp/client_context.h"
#include "grpcpp/support/status.h"

namespace farcall {

grpc::Status ToGrpcStatus(const absl::Status& s);
absl::Status FromGrpcStatus(const grpc::Status& s);

// Whether a failed call to an agent never reached it, so that it may go to
// another agent: a transport failure (UNAVAILABLE) with no sign of the agent
// (its id, kAgentIdMetadataKey, in the answer's metadata). A deadline or a
// cancel says nothing about the agent.
bool NeverReachedAgent(const grpc::Status& s, const grpc::ClientContext& ctx);

}  // namespace farcall

#endif  // FARCALL_CORE_WIRE_GRPC_STATUS_H_
