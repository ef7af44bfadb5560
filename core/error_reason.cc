#include "core/error_reason.h"

#include <optional>
#include <string>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"

namespace farcall {
namespace {

constexpr char kReasonPayload[] = "type.farcall.dev/error-reason";
constexpr char kTracebackPayload[] = "type.farcall.dev/remote-traceback";

}  // namespace

absl::Status WithReason(absl::Status s, ErrorReason reason) {
  if (s.ok() || reason == ErrorReason::kUnspecified) return s;
  s.SetPayload(kReasonPayload, absl::Cord(std::to_string(static_cast<int>(reason))));
  return s;
}

ErrorReason ReasonOf(const absl::Status& s) {
  auto p = s.GetPayload(kReasonPayload);
  int n = 0;
  if (!p.has_value() || !absl::SimpleAtoi(std::string(*p), &n) || n < 0 ||
      n > static_cast<int>(ErrorReason::kDrainCut)) {
    return ErrorReason::kUnspecified;
  }
  return static_cast<ErrorReason>(n);
}

bool DidNotRun(const absl::Status& s) {
  switch (ReasonOf(s)) {
    case ErrorReason::kAgentDraining:
    case ErrorReason::kRouterDraining:
    case ErrorReason::kInputsNotDelivered:
    case ErrorReason::kNoLiveAgent:
      return !s.ok();
    default:
      return false;
  }
}

bool MaySendAgain(const absl::Status& s, bool has_side_effect) {
  if (DidNotRun(s)) return true;
  return !has_side_effect && absl::IsUnavailable(s) && ReasonOf(s) != ErrorReason::kHandlerError;
}

absl::Status WithTraceback(absl::Status s, absl::string_view traceback) {
  if (s.ok() || traceback.empty()) return s;
  if (traceback.size() > kMaxTracebackBytes) {
    traceback = traceback.substr(traceback.size() - kMaxTracebackBytes);
  }
  s.SetPayload(kTracebackPayload, absl::Cord(traceback));
  return s;
}

std::string TracebackOf(const absl::Status& s) {
  auto p = s.GetPayload(kTracebackPayload);
  return p.has_value() ? std::string(*p) : std::string();
}

}  // namespace farcall
