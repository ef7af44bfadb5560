#include "core/retry_policy.h"

#include "core/error_reason.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace farcall {
namespace {

using ::testing::HasSubstr;

absl::Status Broken() { return absl::UnavailableError("connection reset"); }
absl::Status Landed(absl::Status s, int64_t bytes = 4096) {
  return WithLandedResult(std::move(s), {/*arg=*/1, /*result=*/0, bytes, /*size=*/1 << 20});
}

TEST(BackoffTest, DoublesUpToItsMostAndStartsAfreshWhenCopied) {
  Backoff b = kRouterBackoff;
  absl::Duration total;
  for (int i = 0; i < kRouterRetries; ++i) total += b.Next();
  EXPECT_EQ(total, absl::Milliseconds(3100));
  EXPECT_EQ(b.Next(), absl::Milliseconds(1600));  // capped
  Backoff fresh = kSameTargetBackoff;
  EXPECT_EQ(fresh.Peek(), absl::Milliseconds(50));
  fresh.Next();
  fresh.Next();
  fresh.Reset();
  EXPECT_EQ(fresh.Next(), absl::Milliseconds(50));
}

TEST(RetryPolicyTest, TheLandedMarkRoundTripsAndCanBeDropped) {
  absl::Status s = Landed(Broken(), 123);
  std::optional<LandedResult> l = LandedResultOf(s);
  ASSERT_TRUE(l.has_value());
  EXPECT_EQ(l->arg, 1);
  EXPECT_EQ(l->result, 0);
  EXPECT_EQ(l->bytes, 123);
  EXPECT_EQ(l->size, 1 << 20);
  EXPECT_FALSE(LandedResultOf(WithoutLandedResult(s)).has_value());
  EXPECT_TRUE(WithLandedResult(absl::OkStatus(), {}).ok());
}

// The defect this policy exists for: a pure call whose result began to land
// in an aliased arg was sent again from the overwritten bytes.
TEST(RetryPolicyTest, ACallWhoseResultLandedNeverGoesAgainFromThoseBytes) {
  const absl::Status s = Landed(Broken());
  for (Hop hop : {Hop::kAgent, Hop::kLookasideAgent, Hop::kRouter}) {
    EXPECT_EQ(NextStep({s, false, hop}), RetryStep::kDone);
  }
  // Unless the caller restores the arg first.
  EXPECT_EQ(NextStep({s, false, Hop::kAgent, false, /*can_restore_args=*/true}),
            RetryStep::kSameTarget);
  EXPECT_EQ(NextStep({s, false, Hop::kRouter, false, true}), RetryStep::kAnotherRouter);
  EXPECT_EQ(NextStep({s, false, Hop::kLookasideAgent, false, true}), RetryStep::kNextAgent);
}

TEST(RetryPolicyTest, ACallWithSideEffectsGoesAgainOnlyWhenNoHandlerRanIt) {
  const absl::Status broken = Broken();
  EXPECT_EQ(NextStep({broken, true, Hop::kAgent}), RetryStep::kDone);
  EXPECT_EQ(NextStep({broken, true, Hop::kRouter}), RetryStep::kDone);
  EXPECT_EQ(NextStep({broken, true, Hop::kLookasideAgent, /*not_delivered=*/true}),
            RetryStep::kDone);
  const absl::Status draining =
      WithReason(absl::UnavailableError("draining"), ErrorReason::kAgentDraining);
  EXPECT_EQ(NextStep({draining, true, Hop::kAgent}), RetryStep::kSameTarget);
  // An agent that drains refused it before any ledger saw it: the next
  // agent may take it (Lookaside::Judge keeps a call whose caller named its
  // id with its agent).
  EXPECT_EQ(NextStep({draining, true, Hop::kLookasideAgent}), RetryStep::kNextAgent);
  const absl::Status router_draining =
      WithReason(absl::UnavailableError("draining"), ErrorReason::kRouterDraining);
  EXPECT_EQ(NextStep({router_draining, true, Hop::kRouter}), RetryStep::kAnotherRouter);
  // So does one that the router's agent refused as it drained.
  EXPECT_EQ(NextStep({draining, true, Hop::kRouter}), RetryStep::kAnotherRouter);
}

TEST(RetryPolicyTest, APureCallMovesOnWhereAnotherServerMayTakeIt) {
  const absl::Status broken = Broken();
  EXPECT_EQ(NextStep({broken, false, Hop::kAgent}), RetryStep::kSameTarget);
  EXPECT_EQ(NextStep({broken, false, Hop::kRouter}), RetryStep::kAnotherRouter);
  EXPECT_EQ(NextStep({broken, false, Hop::kLookasideAgent}), RetryStep::kNextAgent);
  const absl::Status no_agent =
      WithReason(absl::UnavailableError("none"), ErrorReason::kNoLiveAgent);
  EXPECT_EQ(NextStep({no_agent, false, Hop::kRouter}), RetryStep::kSameTarget);
}

TEST(RetryPolicyTest, AnswersAndCancelsEndTheCall) {
  const absl::Status raised =
      WithReason(absl::UnavailableError("mine"), ErrorReason::kHandlerError);
  const absl::Status refused =
      WithReason(absl::PermissionDeniedError("no"), ErrorReason::kAuthRefused);
  for (Hop hop : {Hop::kAgent, Hop::kLookasideAgent, Hop::kRouter}) {
    EXPECT_EQ(NextStep({absl::OkStatus(), false, hop}), RetryStep::kDone);
    EXPECT_EQ(NextStep({absl::CancelledError("stop"), false, hop}), RetryStep::kDone);
    EXPECT_EQ(NextStep({raised, false, hop}), RetryStep::kDone);
    EXPECT_EQ(NextStep({absl::InvalidArgumentError("bad"), false, hop}), RetryStep::kDone);
  }
  EXPECT_EQ(NextStep({refused, false, Hop::kLookasideAgent}), RetryStep::kViaRouter);
  EXPECT_EQ(NextStep({refused, false, Hop::kAgent}), RetryStep::kDone);
}

TEST(RetryPolicyTest, TheFinalStatusNamesTheArgAndHowMuchOfItHoldsTheResult) {
  const absl::Status s = AsFinalStatus(Landed(Broken(), 4096));
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(ReasonOf(s), ErrorReason::kAliasedArgOverwritten);
  EXPECT_EQ(s.message(),
            "results[0] had begun to land in args[1], which it aliases: 4096 of the 1048576 "
            "bytes of args[1] hold the result, and args[1] no longer holds the call's input. The "
            "call was not sent again: call it again with the original args[1], or set "
            "keep_aliased_args for farcall to keep a copy. The attempt failed with UNAVAILABLE: "
            "connection reset");
  EXPECT_FALSE(LandedResultOf(s).has_value());
  const absl::Status in_place = AsFinalStatus(Landed(Broken(), -1));
  EXPECT_THAT(in_place.message(),
              HasSubstr("may have begun to land in args[1], which it aliases: it is written "
                        "there in place, so any of the 1048576 bytes of args[1] may hold the "
                        "result"));
  // A failure that would not have gone again keeps its code, without the mark.
  const absl::Status late = AsFinalStatus(Landed(absl::DeadlineExceededError("late")));
  EXPECT_EQ(late.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_FALSE(LandedResultOf(late).has_value());
  EXPECT_EQ(AsFinalStatus(Broken()), Broken());
}

}  // namespace
}  // namespace farcall
