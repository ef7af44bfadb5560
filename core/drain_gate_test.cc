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
  DrainGate gate(/*quiet=*/absl::ZeroDuration());
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

// While calls are still turned away, the drain goes on (their senders learn
// that the server drains, and go elsewhere): it ends `quiet` after the last,
// and, after recent calls, lasts `quiet` at least.
TEST(DrainGateTest, ADrainEndsOnlyOnceNoCallWasTurnedAwayForAWhile) {
  DrainGate gate(absl::Milliseconds(200));
  ASSERT_TRUE(gate.Enter());
  gate.Leave();
  std::atomic<bool> drained{false};
  absl::Time ended;
  std::thread drainer([&] {
    drained = gate.DrainFor(absl::Seconds(60));
    ended = absl::Now();
  });
  while (!gate.draining()) {
  }
  absl::Time last;
  for (int i = 0; i < 5; ++i) {  // a call turned away every 100 ms
    EXPECT_FALSE(gate.Enter());
    last = absl::Now();
    EXPECT_FALSE(drained) << "the drain ended while calls still came";
    absl::SleepFor(absl::Milliseconds(100));
  }
  drainer.join();
  EXPECT_TRUE(drained);
  EXPECT_GE(ended - last, absl::Milliseconds(200));
  // With nothing turned away, an idle drain ends at once.
  DrainGate idle;
  const absl::Time start = absl::Now();
  EXPECT_TRUE(idle.DrainFor(absl::Seconds(60)));
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(100));
}

TEST(DrainGateTest, AHeldDrainEndsAtItsTimeout) {
  DrainGate gate;
  EXPECT_FALSE(gate.DrainFor(absl::Milliseconds(300), [] { return true; }));
}

}  // namespace
}  // namespace farcall
