// Why a call failed, as a typed mark on its absl::Status, for the decisions
// that follow a failure (retry elsewhere, go through the router, give up).
// Servers mark their own refusals; clients read the mark, never the message
// text, which stays what the status contract says. On the wire the mark is
// a farcall.v1.ErrorDetail in the status details (core/wire/grpc_status.h
// converts both ways).
//
//   return WithReason(absl::UnavailableError("..."), ErrorReason::kAgentDraining);
//   if (ReasonOf(status) == ErrorReason::kAuthRefused) ...
#ifndef FARCALL_CORE_ERROR_REASON_H_
#define FARCALL_CORE_ERROR_REASON_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace farcall {

// The numbers are farcall.v1.ErrorDetail.Reason's (grpc_status.cc asserts).
enum class ErrorReason : int {
  kUnspecified = 0,
  kAgentDraining = 1,
  kAuthRefused = 2,
  kInputsNotDelivered = 3,
  kNoLiveAgent = 4,
  kHandlerError = 5,
  kRouterDraining = 6,
  kAliasedArgOverwritten = 7,
  kResidentLost = 8,
  kDrainCut = 9,
};

// `s` marked with `reason` (an OK status stays OK).
absl::Status WithReason(absl::Status s, ErrorReason reason);
// The mark on `s`; kUnspecified when it has none.
ErrorReason ReasonOf(const absl::Status& s);
// Whether `s` says that no handler ran the call (an agent or router
// draining, its inputs not delivered, no live agent): sending it again, with
// its call_id, is safe even with side effects.
bool DidNotRun(const absl::Status& s);
// Whether a caller may send a failed call again: when it did not run, or,
// for a call without side effects, on any UNAVAILABLE that no handler
// raised (the target unreachable, a connection broken: running a pure call
// twice is harmless).
bool MaySendAgain(const absl::Status& s, bool has_side_effect);

// The traceback of a handler that raised, as Python prints it, bounded to
// kMaxTracebackBytes (its end kept); "" for none.
inline constexpr size_t kMaxTracebackBytes = 8 << 10;
absl::Status WithTraceback(absl::Status s, absl::string_view traceback);
std::string TracebackOf(const absl::Status& s);

}  // namespace farcall

#endif  // FARCALL_CORE_ERROR_REASON_H_
