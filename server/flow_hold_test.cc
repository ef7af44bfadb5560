#include "server/flow_hold.h"

#include <atomic>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace farcall::router {
namespace {

// Counts holds as gRPC's client reactors do.
struct FakeStream {
  std::atomic<int> holds{0};
  std::atomic<int> removed{0};
  void AddHold() { ++holds; }
  void RemoveHold() {
    ++removed;
    --holds;
  }
};

TEST(FlowHoldTest, TheHoldGoesOnceHoweverOftenTheFlowEnds) {
  FakeStream s;
  FlowHold<FakeStream> writes, reads;
  writes.Take(&s);
  reads.Take(&s);
  EXPECT_EQ(s.holds, 2);
  EXPECT_TRUE(reads.Release());
  EXPECT_FALSE(reads.Release());
  EXPECT_EQ(s.holds, 1);
  EXPECT_TRUE(writes.held());
  EXPECT_TRUE(writes.Release());
  EXPECT_EQ(s.holds, 0);
  EXPECT_EQ(s.removed, 2);
}

TEST(FlowHoldTest, AClaimLeavesTheRemovalToTheClaimerAndStopsLaterReleases) {
  FakeStream s;
  FlowHold<FakeStream> writes;
  writes.Take(&s);
  ASSERT_TRUE(writes.Claim());
  EXPECT_FALSE(writes.held());
  EXPECT_EQ(s.holds, 1);  // still there: the claimer removes it
  EXPECT_FALSE(writes.Release());
  EXPECT_FALSE(writes.Claim());
  s.RemoveHold();
  EXPECT_EQ(s.removed, 1);
}

TEST(FlowHoldTest, AHoldTakenAgainForTheNextAttemptIsAFreshOne) {
  FakeStream first, second;
  FlowHold<FakeStream> h;
  h.Take(&first);
  EXPECT_TRUE(h.Release());
  h.Take(&second);
  EXPECT_TRUE(h.Release());
  EXPECT_EQ(first.removed, 1);
  EXPECT_EQ(second.removed, 1);
}

TEST(FlowHoldTest, ThreadsRacingToEndAFlowRemoveItsHoldExactlyOnce) {
  for (int round = 0; round < 200; ++round) {
    FakeStream s;
    FlowHold<FakeStream> h;
    h.Take(&s);
    std::atomic<int> won{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        if (t % 2 == 0) {
          won += h.Release() ? 1 : 0;
        } else if (h.Claim()) {
          ++won;
          s.RemoveHold();
        }
      });
    }
    for (std::thread& t : threads) t.join();
    ASSERT_EQ(won, 1);
    ASSERT_EQ(s.removed, 1);
    ASSERT_EQ(s.holds, 0);
  }
}

}  // namespace
}  // namespace farcall::router
