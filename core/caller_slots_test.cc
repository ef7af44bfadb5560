#include "core/caller_slots.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace farcall {
namespace {

TEST(CallerSlotsTest, EachCallerHasItsOwnSlotsAndNoCallerNone) {
  CallerSlots slots;
  const CallerSlots::Limit two{2};
  bool took = false;
  EXPECT_TRUE(slots.Take("token:a", two, &took).ok());
  EXPECT_TRUE(took);
  EXPECT_TRUE(slots.Take("token:a", two, &took).ok());
  absl::Status third = slots.Take("token:a", two, &took);
  EXPECT_FALSE(took);
  EXPECT_EQ(third.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(third.message(),
            "this caller has 2 calls in flight on this agent, its most (--tenant_max_calls=2); "
            "retry when one ends.");
  EXPECT_EQ(slots.held("token:a"), 2);
  // Another caller is not touched.
  EXPECT_TRUE(slots.Take("token:b", two, &took).ok());
  // One ends: a's next call goes.
  slots.Give("token:a");
  EXPECT_TRUE(slots.Take("token:a", two, &took).ok());
  // Calls without a principal, or without a limit, are never counted.
  for (int i = 0; i < 10; ++i) {
    EXPECT_TRUE(slots.Take("", two, &took).ok());
    EXPECT_FALSE(took);
    EXPECT_TRUE(slots.Take("token:c", {}, &took).ok());
    EXPECT_FALSE(took);
  }
  EXPECT_EQ(slots.held(""), 0);
  EXPECT_EQ(slots.held("token:c"), 0);
  slots.Give("token:a");
  slots.Give("token:a");
  slots.Give("token:b");
  EXPECT_EQ(slots.held("token:a"), 0);
  EXPECT_EQ(slots.held("token:b"), 0);
}

// A tenant's own line may set its limit; the refusal then names the line.
TEST(CallerSlotsTest, ALimitFromTheTokensFileIsNamedAsSuch) {
  CallerSlots slots;
  bool took = false;
  ASSERT_TRUE(slots.Take("tenant:a", {1, true}, &took).ok());
  absl::Status second = slots.Take("tenant:a", {1, true}, &took);
  EXPECT_EQ(second.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(second.message(),
            "this caller has 1 calls in flight on this agent, its most (max_calls=1 on its "
            "tokens-file line); retry when one ends.");
}

}  // namespace
}  // namespace farcall
