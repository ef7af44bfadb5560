#include "core/retry_policy.h"

#include <string>
#include <vector>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/error_reason.h"

namespace farcall {
namespace {

constexpr char kLandedPayload[] = "type.farcall.dev/result-landed";

}  // namespace

absl::Status WithLandedResult(absl::Status s, const LandedResult& landed) {
  if (s.ok()) return s;
  s.SetPayload(kLandedPayload, absl::Cord(absl::StrCat(landed.arg, ":", landed.result, ":",
                                                       landed.bytes, ":", landed.size)));
  return s;
}

std::optional<LandedResult> LandedResultOf(const absl::Status& s) {
  auto p = s.GetPayload(kLandedPayload);
  if (!p.has_value()) return std::nullopt;
  const std::vector<std::string> parts = absl::StrSplit(std::string(*p), ':');
  LandedResult r;
  if (parts.size() != 4 || !absl::SimpleAtoi(parts[0], &r.arg) ||
      !absl::SimpleAtoi(parts[1], &r.result) || !absl::SimpleAtoi(parts[2], &r.bytes) ||
      !absl::SimpleAtoi(parts[3], &r.size)) {
    return std::nullopt;
  }
  return r;
}

absl::Status WithoutLandedResult(absl::Status s) {
  s.ErasePayload(kLandedPayload);
  return s;
}

RetryStep NextStep(const Attempt& a) {
  const absl::Status& s = a.status;
  // CANCELLED: the caller stopped the call.
  if (s.ok() || absl::IsCancelled(s)) return RetryStep::kDone;
  if (LandedResultOf(s).has_value() && !a.can_restore_args) return RetryStep::kDone;
  const ErrorReason reason = ReasonOf(s);
  const bool pure = !a.has_side_effect;
  switch (a.hop) {
    case Hop::kLookasideAgent:
      // The agent refused this client's token or the router's capability:
      // the router may hold a credential it takes. A handler's own
      // PERMISSION_DENIED is its answer, never a reason to run it again.
      if (reason == ErrorReason::kAuthRefused) return RetryStep::kViaRouter;
      // A call with side effects stays with the agent that may hold its
      // ledger entry; the top level decides whether it goes again. One the
      // agent refused before running it (draining) is in no ledger there,
      // and goes to the next agent: every attempt before it was refused the
      // same way (no step sends again a call with side effects that may
      // have run).
      if (!pure) return DidNotRun(s) ? RetryStep::kNextAgent : RetryStep::kDone;
      if (a.not_delivered || DidNotRun(s)) return RetryStep::kNextAgent;
      // The agent went away mid-call: running a pure call twice is harmless.
      return absl::IsUnavailable(s) && reason != ErrorReason::kHandlerError ? RetryStep::kNextAgent
                                                                            : RetryStep::kDone;
    case Hop::kRouter:
      // A router that drains, or an agent it chose that drains (it refused
      // the call before running it): another replica, or this router's next
      // choice, may take it, side effects or not (the client keeps a call
      // whose caller named its id with its agent: Client's Attempts::Next).
      if (reason == ErrorReason::kRouterDraining || reason == ErrorReason::kAgentDraining) {
        return RetryStep::kAnotherRouter;
      }
      // The router could not be reached, or the call broke on the way
      // (UNAVAILABLE that no server marked): another replica may take it.
      if (pure && absl::IsUnavailable(s) && reason == ErrorReason::kUnspecified &&
          TracebackOf(s).empty()) {
        return RetryStep::kAnotherRouter;
      }
      return MaySendAgain(s, a.has_side_effect) ? RetryStep::kSameTarget : RetryStep::kDone;
    case Hop::kAgent:
      return MaySendAgain(s, a.has_side_effect) ? RetryStep::kSameTarget : RetryStep::kDone;
  }
  return RetryStep::kDone;
}

absl::Status AliasedArgOverwritten(const absl::Status& failure) {
  const std::optional<LandedResult> l = LandedResultOf(failure);
  if (!l.has_value()) return failure;
  const std::string arg = absl::StrCat("args[", l->arg, "]");
  std::string what;
  if (l->bytes >= 0) {
    what = absl::StrCat("results[", l->result, "] had begun to land in ", arg,
                        ", which it aliases: ", l->bytes, " of the ", l->size, " bytes of ", arg,
                        " hold the result");
  } else {
    what = absl::StrCat("results[", l->result, "] may have begun to land in ", arg,
                        ", which it aliases: it is written there in place, so any of the ", l->size,
                        " bytes of ", arg, " may hold the result");
  }
  absl::Status s = absl::AbortedError(absl::StrCat(
      what, ", and ", arg, " no longer holds the call's input. The call was not sent again: call ",
      "it again with the original ", arg, ", or set keep_aliased_args for farcall to keep a copy. ",
      "The attempt failed with ", absl::StatusCodeToString(failure.code()), ": ",
      failure.message()));
  return WithReason(std::move(s), ErrorReason::kAliasedArgOverwritten);
}

absl::Status AsFinalStatus(const absl::Status& s) {
  if (s.ok() || !LandedResultOf(s).has_value()) return s;
  const absl::Status bare = WithoutLandedResult(s);
  if (MaySendAgain(bare, /*has_side_effect=*/false)) return AliasedArgOverwritten(s);
  return bare;
}

}  // namespace farcall
