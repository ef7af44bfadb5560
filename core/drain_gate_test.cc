#include "core/drain_gate.h"

#include <atomic>
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

TEST(DrainGateTest, AHeldDrainLetsItsCallsInWhileItWaits) {
  DrainGate gate;
  std::atomic<bool> held{true};
  std::atomic<bool> drained{false};
  std::thread drainer(
      [&] { drained = gate.DrainFor(absl::Seconds(60), [&] { return held.load(); }); });
  while (!gate.draining()) {
  }
  // Idle but held: the gate is not locked up, and its exempt calls enter.
  EXPECT_FALSE(gate.Enter());
  gate.EnterWhileDraining();
  EXPECT_EQ(gate.in_flight(), 1);
  gate.Leave();
  held = false;
  drainer.join();
  EXPECT_TRUE(drained);
}

TEST(DrainGateTest, AHeldDrainEndsAtItsTimeout) {
  DrainGate gate;
  EXPECT_FALSE(gate.DrainFor(absl::Milliseconds(300), [] { return true; }));
}

}  // namespace
}  // namespace farcall
