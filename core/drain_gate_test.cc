#include "core/drain_gate.h"

#include <thread>

#include "gtest/gtest.h"

namespace farcall {
namespace {

TEST(DrainGateTest, DrainingTurnsNewCallsAwayAndWaitsForTheOthers) {
  DrainGate gate;
  ASSERT_TRUE(gate.Enter());
  ASSERT_TRUE(gate.Enter());
  EXPECT_EQ(gate.in_flight(), 2);
  std::thread drainer([&] { EXPECT_TRUE(gate.DrainFor(absl::Seconds(60))); });
  // Once draining, no call gets in (asked until the drainer has begun).
  while (!gate.draining()) {
  }
  EXPECT_FALSE(gate.Enter());
  gate.Leave();
  gate.Leave();
  drainer.join();
  EXPECT_EQ(gate.in_flight(), 0);
}

TEST(DrainGateTest, ADrainThatTimesOutSaysSo) {
  DrainGate gate;
  ASSERT_TRUE(gate.Enter());
  EXPECT_FALSE(gate.DrainFor(absl::Milliseconds(10)));
  gate.Leave();
  EXPECT_TRUE(gate.DrainFor(absl::ZeroDuration()));
}

}  // namespace
}  // namespace farcall
