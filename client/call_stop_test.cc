#include "client/call_stop.h"

#include <atomic>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace farcall::client_internal {
namespace {

TEST(CallStopTest, AHookRunsOnceWhenEitherStopIsStopped) {
  CallStop a, b;
  int runs = 0;
  StopHook hook(&a, &b, [&] { ++runs; });
  EXPECT_EQ(runs, 0);
  b.Stop();
  EXPECT_EQ(runs, 1);
  a.Stop();
  b.Stop();
  EXPECT_EQ(runs, 1);
  EXPECT_TRUE(Stopped(&a, nullptr));
  EXPECT_TRUE(Stopped(nullptr, &b));
  EXPECT_FALSE(Stopped(nullptr, nullptr));
}

TEST(CallStopTest, AHookOnAStopAlreadyStoppedRunsAtOnce) {
  CallStop a;
  a.Stop();
  int runs = 0;
  StopHook hook(nullptr, &a, [&] { ++runs; });
  EXPECT_EQ(runs, 1);
}

TEST(CallStopTest, AHookGoneBeforeTheStopNeverRuns) {
  CallStop a;
  int runs = 0;
  {
    StopHook hook(&a, nullptr, [&] { ++runs; });
  }
  a.Stop();
  EXPECT_EQ(runs, 0);
  EXPECT_EQ(StoppedStatus().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(StoppedStatus().message(), "the caller stopped the call.");
}

// A hook may end its own call, and the call destroy the hook, from within
// the hook (gRPC may end a call inline when it is cancelled).
TEST(CallStopTest, AHookMayBeDestroyedFromWithinItself) {
  CallStop a;
  std::optional<StopHook> hook;
  hook.emplace(&a, nullptr, [&] { hook.reset(); });
  a.Stop();
  EXPECT_FALSE(hook.has_value());
}

// Calls come and go (hooks made and destroyed) on many threads while
// another thread stops: every hook that lived at the stop ran exactly
// once, none ran after its destruction, and nothing raced (TSan runs this:
// tests/tsan).
TEST(CallStopTest, HooksComingAndGoingWhileStoppedRunOnceOrNever) {
  for (int round = 0; round < 20; ++round) {
    CallStop stop;
    std::atomic<bool> go{false};
    std::atomic<int> ran{0}, after_destruction{0};
    std::vector<std::thread> callers;
    for (int t = 0; t < 4; ++t) {
      callers.emplace_back([&] {
        while (!go) {
        }
        for (int i = 0; i < 200; ++i) {
          auto alive = std::make_shared<std::atomic<bool>>(true);
          {
            StopHook hook(&stop, nullptr, [&, alive] {
              if (!*alive) ++after_destruction;
              ++ran;
            });
          }
          *alive = false;
        }
      });
    }
    go = true;
    stop.Stop();
    for (std::thread& t : callers) t.join();
    EXPECT_EQ(after_destruction.load(), 0);
    EXPECT_LE(ran.load(), 800);
    EXPECT_TRUE(stop.stopped());
  }
}

}  // namespace
}  // namespace farcall::client_internal
