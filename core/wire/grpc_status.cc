#include "core/wire/grpc_status.h"

#include <string>

#include "core/error_reason.h"
#include "core/wire/protocol.h"
#include "farcall/v1/farcall.pb.h"

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

#define FARCALL_SAME_REASON(name, farcall_name) \
  static_assert(static_cast<int>(ErrorReason::farcall_name) == v1::ErrorDetail::name)
FARCALL_SAME_REASON(REASON_UNSPECIFIED, kUnspecified);
FARCALL_SAME_REASON(AGENT_DRAINING, kAgentDraining);
FARCALL_SAME_REASON(AUTH_REFUSED, kAuthRefused);
FARCALL_SAME_REASON(INPUTS_NOT_DELIVERED, kInputsNotDelivered);
FARCALL_SAME_REASON(NO_LIVE_AGENT, kNoLiveAgent);
FARCALL_SAME_REASON(HANDLER_ERROR, kHandlerError);
FARCALL_SAME_REASON(ROUTER_DRAINING, kRouterDraining);
FARCALL_SAME_REASON(ALIASED_ARG_OVERWRITTEN, kAliasedArgOverwritten);
FARCALL_SAME_REASON(RESIDENT_LOST, kResidentLost);
FARCALL_SAME_REASON(DRAIN_CUT, kDrainCut);
#undef FARCALL_SAME_REASON

constexpr char kErrorDetailType[] = "type.googleapis.com/farcall.v1.ErrorDetail";
// What one status's details may hold before they are ignored.
constexpr size_t kMaxDetailsBytes = 32 << 10;

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  const auto code = static_cast<grpc::StatusCode>(s.code());
  const ErrorReason reason = ReasonOf(s);
  std::string traceback = TracebackOf(s);
  if (reason == ErrorReason::kUnspecified && traceback.empty()) {
    return grpc::Status(code, std::string(s.message()));
  }
  v1::ErrorDetail detail;
  detail.set_reason(static_cast<v1::ErrorDetail::Reason>(reason));
  detail.set_remote_traceback(std::move(traceback));
  v1::RpcStatus rpc;
  rpc.set_code(static_cast<int>(s.code()));
  rpc.set_message(std::string(s.message()));
  v1::RpcStatusDetail* d = rpc.add_details();
  d->set_type_url(kErrorDetailType);
  d->set_value(detail.SerializeAsString());
  return grpc::Status(code, std::string(s.message()), rpc.SerializeAsString());
}

absl::Status FromGrpcStatus(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  absl::Status out(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
  v1::RpcStatus rpc;
  if (s.error_details().empty() || s.error_details().size() > kMaxDetailsBytes ||
      !rpc.ParseFromString(s.error_details())) {
    return out;
  }
  for (const v1::RpcStatusDetail& d : rpc.details()) {
    v1::ErrorDetail detail;
    if (d.type_url() == kErrorDetailType && detail.ParseFromString(d.value())) {
      out = WithReason(std::move(out), static_cast<ErrorReason>(detail.reason()));
      out = WithTraceback(std::move(out), detail.remote_traceback());
    }
  }
  return out;
}

bool NeverReachedAgent(const grpc::Status& s, const grpc::ClientContext& ctx) {
  return s.error_code() == grpc::StatusCode::UNAVAILABLE &&
         ctx.GetServerInitialMetadata().count(kAgentIdMetadataKey) == 0 &&
         ctx.GetServerTrailingMetadata().count(kAgentIdMetadataKey) == 0;
}

}  // namespace farcall
