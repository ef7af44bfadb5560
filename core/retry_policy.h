// When farcall sends a failed call again, and how long it waits first: the
// one retry policy of the project. Every layer that may send a call again
// (the client's top level, the lookaside's choice of the next agent, the
// Python extension through CallOptions::retries) asks NextStep, and waits
// with a Backoff; none decides on its own.
//
// Exactness comes first. A result aliased to an arg is written into the
// caller's memory for that arg as its bytes arrive, so once any byte of it
// has landed the arg no longer holds the call's input. An attempt that fails
// then is marked (WithLandedResult), and no layer sends it again from those
// bytes: the top level either restores the arg from a copy it made before
// the first attempt (CallOptions::keep_aliased_args) and sends it again, or
// ends the call with AliasedArgOverwritten's typed error.
//
//   RetryStep step = NextStep({status, has_side_effect, Hop::kRouter});
//   if (step == RetryStep::kAnotherRouter) wait(backoff.Next()), send again;
#ifndef FARCALL_CORE_RETRY_POLICY_H_
#define FARCALL_CORE_RETRY_POLICY_H_

#include <algorithm>
#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace farcall {

// Doubling waits between attempts: `first`, twice that, ... at most `most`.
// A value: copy it to start a fresh schedule.
class Backoff {
 public:
  constexpr Backoff(absl::Duration first, absl::Duration most)
      : first_(first), most_(most), next_(first) {}
  // The wait before the next attempt; the one after it doubles.
  absl::Duration Next() {
    const absl::Duration wait = next_;
    next_ = std::min(next_ * 2, most_);
    return wait;
  }
  // What Next would return, without taking it.
  absl::Duration Peek() const { return next_; }
  void Reset() { next_ = first_; }

 private:
  absl::Duration first_;
  absl::Duration most_;
  absl::Duration next_;
};

// Waits before a call goes again through a router that drained or could not
// be reached: 100 ms doubling to 1.6 s, 3.1 s over five waits, which outlasts
// a draining router's refusals and its clients' reconnect (back-off at most
// 1 s) to another replica.
inline constexpr Backoff kRouterBackoff{absl::Milliseconds(100), absl::Milliseconds(1600)};
// Waits before a call goes again to the same target (an agent restarting, a
// router's next probe): 50 ms doubling to 1 s.
inline constexpr Backoff kSameTargetBackoff{absl::Milliseconds(50), absl::Seconds(1)};
// How often a call goes again through a router that drains or cannot be
// reached (another replica takes it), whatever CallOptions::retries says.
inline constexpr int kRouterRetries = 5;

// Where an attempt went.
enum class Hop {
  kAgent,           // the client's target, an agent
  kLookasideAgent,  // an agent a router named, called directly
  kRouter,          // the client's target, a router (the call through it, or the lookaside)
};

// What follows a failed attempt.
enum class RetryStep {
  kDone,           // the caller gets this outcome
  kNextAgent,      // the lookaside's next agent (no wait)
  kViaRouter,      // through the router instead of its agents
  kAnotherRouter,  // again through the router's address, after kRouterBackoff
  kSameTarget,     // again to the same target, after kSameTargetBackoff
};

// How much of an aliased arg a failed attempt's result wrote over.
struct LandedResult {
  int64_t arg = 0;     // the arg's index
  int64_t result = 0;  // the result's index
  int64_t bytes = 0;   // bytes of the arg that hold the result; -1: unknown (written in place)
  int64_t size = 0;    // the arg's size in bytes
};
// `s` (not OK) marked as an attempt whose result landed in an aliased arg.
// The mark stays in this process: it never crosses the wire.
absl::Status WithLandedResult(absl::Status s, const LandedResult& landed);
std::optional<LandedResult> LandedResultOf(const absl::Status& s);
absl::Status WithoutLandedResult(absl::Status s);

// One failed attempt, as the layer that made it saw it.
struct Attempt {
  const absl::Status& status;
  bool has_side_effect = false;
  Hop hop = Hop::kAgent;
  // The lookaside's channel never reached the agent (no byte of the call
  // was taken there).
  bool not_delivered = false;
  // The caller holds a copy of every aliased arg as it was before the first
  // attempt (keep_aliased_args), and restores it before the next one.
  bool can_restore_args = false;
};

// The one classifier. A call whose result landed in an aliased arg never
// goes again unless `can_restore_args`; a call with side effects goes again
// only when no handler ran it (DidNotRun, or the lookaside's not-delivered
// mark); a cancel by the caller, and any answer a handler gave, end it.
RetryStep NextStep(const Attempt& attempt);

// The typed error of a call that failed after its result had begun to land
// in an aliased arg, and that farcall would otherwise have sent again:
// ABORTED, marked ErrorReason::kAliasedArgOverwritten, its message as the
// status contract states (docs/architecture.md). `failure` (marked with
// WithLandedResult) is the attempt's own outcome, quoted at the end.
absl::Status AliasedArgOverwritten(const absl::Status& failure);
// The caller's view of a call's last outcome: AliasedArgOverwritten when its
// result landed and it would otherwise have gone again (any failure that
// may be sent again, MaySendAgain, as if it had no side effects); `s` less
// the landed mark otherwise.
absl::Status AsFinalStatus(const absl::Status& s);

}  // namespace farcall

#endif  // FARCALL_CORE_RETRY_POLICY_H_
