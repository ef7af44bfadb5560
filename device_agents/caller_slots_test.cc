#include "device_agents/caller_slots.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace farcall::agent {
namespace {

TEST(CallerSlotsTest, EachCallerHasItsOwnSlotsAndNoCallerNone) {
  CallerSlots slots(2);
  EXPECT_TRUE(slots.Take("token:a").ok());
  EXPECT_TRUE(slots.Take("token:a").ok());
  absl::Status third = slots.Take("token:a");
  EXPECT_EQ(third.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(third.message(),
            "this caller has 2 calls in flight on this agent, its most (--tenant_max_calls=2); "
            "retry when one ends.");
  EXPECT_EQ(slots.held("token:a"), 2);
  // Another caller is not touched.
  EXPECT_TRUE(slots.Take("token:b").ok());
  // One ends: a's next call goes.
  slots.Give("token:a");
  EXPECT_TRUE(slots.Take("token:a").ok());
  // Calls without a principal are never counted.
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(slots.Take("").ok());
  EXPECT_EQ(slots.held(""), 0);
  slots.Give("token:a");
  slots.Give("token:a");
  slots.Give("token:b");
  EXPECT_EQ(slots.held("token:a"), 0);
  EXPECT_EQ(slots.held("token:b"), 0);
}

}  // namespace
}  // namespace farcall::agent
