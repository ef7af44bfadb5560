// The one conversion between absl::Status and grpc::Status. The codes have the
// same numbers; grpc_status.cc asserts it.
#ifndef FARCALL_CORE_WIRE_GRPC_STATUS_H_
#define FARCALL_CORE_WIRE_GRPC_STATUS_H_

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace farcall {

grpc::Status ToGrpcStatus(const absl::Status& s);
absl::Status FromGrpcStatus(const grpc::Status& s);

}  // namespace farcall

#endif  // FARCALL_CORE_WIRE_GRPC_STATUS_H_
