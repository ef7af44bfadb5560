#include "client/polling_slot.h"

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace farcall::client_internal {
namespace {

TEST(PollingSlotTest, NoMoreThanTheTurnsAreHeldAndAGivenBackTurnIsTakenAgain) {
  std::atomic<int> polling{0};
  auto a = std::make_unique<PollingSlot>(polling, 2);
  PollingSlot b(polling, 2);
  EXPECT_TRUE(a->held());
  EXPECT_TRUE(b.held());
  {
    PollingSlot c(polling, 2);
    EXPECT_FALSE(c.held());  // and gives back nothing when it goes
  }
  EXPECT_EQ(polling.load(), 2);
  a.reset();
  EXPECT_EQ(polling.load(), 1);
  PollingSlot d(polling, 2);
  EXPECT_TRUE(d.held());
}

TEST(PollingSlotTest, ManyThreadsTakingTurnsNeverHoldMoreThanTheTurns) {
  std::atomic<int> polling{0}, most{0}, held{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 20000; ++i) {
        PollingSlot slot(polling, 3);
        if (!slot.held()) continue;
        held.fetch_add(1);
        int now = polling.load();
        int m = most.load();
        while (now > m && !most.compare_exchange_weak(m, now)) {
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_LE(most.load(), 3);
  EXPECT_GT(held.load(), 0);
  EXPECT_EQ(polling.load(), 0);
}

TEST(PollingSlotTest, TheProcessHasAtLeastOneTurn) {
  PollingSlot slot;
  EXPECT_TRUE(slot.held());
}

}  // namespace
}  // namespace farcall::client_internal
