#include "core/wire/grpc_status.h"

#include <string>

#include "core/wire/protocol.h"

namespace farcall {
namespace {

#define FARCALL_SAME_CODE(name, absl_name)                  \
  static_assert(static_cast<int>(grpc::StatusCode::name) == \
                static_cast<int>(absl::StatusCode::absl_name))
FARCALL_SAME_CODE(OK, kOk);
FARCALL_SAME_CODE(CANCELLED, kCancelled);
FARCALL_SAME_CODE(UNKNOWN, kUnknown);
FARCALL_SAME_CODE(INVALID_ARGUMENT, kInvalidArgument);
FARCALL_SAME_CODE(DEADLINE_EXCEEDED, kDeadlineExceeded);
FARCALL_SAME_CODE(NOT_FOUND, kNotFound);
FARCALL_SAME_CODE(ALREADY_EXISTS, kAlreadyExists);
FARCALL_SAME_CODE(PERMISSION_DENIED, kPermissionDenied);
FARCALL_SAME_CODE(RESOURCE_EXHAUSTED, kResourceExhausted);
FARCALL_SAME_CODE(FAILED_PRECONDITION, kFailedPrecondition);
FARCALL_SAME_CODE(ABORTED, kAborted);
FARCALL_SAME_CODE(OUT_OF_RANGE, kOutOfRange);
FARCALL_SAME_CODE(UNIMPLEMENTED, kUnimplemented);
FARCALL_SAME_CODE(INTERNAL, kInternal);
FARCALL_SAME_CODE(UNAVAILABLE, kUnavailable);
FARCALL_SAME_CODE(DATA_LOSS, kDataLoss);
FARCALL_SAME_CODE(UNAUTHENTICATED, kUnauthenticated);
#undef FARCALL_SAME_CODE

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

bool NeverReachedAgent(const grpc::Status& s, const grpc::ClientContext& ctx) {
  return s.error_code() == grpc::StatusCode::UNAVAILABLE &&
         ctx.GetServerInitialMetadata().count(kAgentIdMetadataKey) == 0 &&
         ctx.GetServerTrailingMetadata().count(kAgentIdMetadataKey) == 0;
}

}  // namespace farcall
