// A handler that writes only part of its result never hands the caller an
// earlier call's bytes: the agent zeroes the results of handlers that do
// not declare FARCALL_TRAIT_WRITES_ALL_RESULTS (test.half of
// tests/plugins/side_effect_plugin.cc writes the first half only).
//
// On cpu by default. FARCALL_TEST_PLATFORM=cuda with FARCALL_TEST_PLUGIN set
// to tests/plugins/half_cuda_plugin's build checks device memory the same
// way (tests/gpu/run_device_checks.sh does).
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "farcall/client.h"
#include "gtest/gtest.h"
#include "tests/process_harness.h"

namespace farcall {
namespace {

using ::farcall::testing::BinaryPath;
using ::farcall::testing::ChildProcess;

// Over gRPC (allow_shm off), or forced through same-host shared memory: a
// device agent then gives the call device memory of its own, which must be
// zeroed as any call's.
void ExpectUnwrittenResultsZeroed(bool shared_memory) {
  const std::string platform = BinaryPath("FARCALL_TEST_PLATFORM", "cpu");
  auto agent = ChildProcess::Start(
      FARCALL_AGENT_BIN,
      {"--listen=127.0.0.1:0", "--workers=1", "--platform=" + platform,
       "--plugins=" + BinaryPath("FARCALL_TEST_PLUGIN", FARCALL_SIDE_EFFECT_PLUGIN)});
  ASSERT_TRUE(agent.ok()) << agent.status();
  auto client = Client::Connect((*agent)->address());
  ASSERT_TRUE(client.ok());
  constexpr int64_t kN = 64 << 10;  // small enough for the allocator to reuse memory
  const TensorSpec spec{DType::kU8, {kN}};
  std::vector<uint8_t> secret(kN, 0xAB);
  CallOptions o;
  o.allow_shm = false;
  if (shared_memory) o.transport = Transport::kShm;
  for (int round = 0; round < 20; ++round) {
    // A call that leaves 0xAB in memory the agent frees...
    CallRequest copy;
    copy.handler = "copy";
    copy.platform = platform;
    copy.args = {Arg::In(spec, secret.data())};
    copy.results = {spec};
    ASSERT_TRUE((*client)->Call(copy, o).ok());
    // ...then one whose handler writes half of a result of the same size.
    CallRequest half;
    half.handler = "test.half";
    half.platform = platform;
    half.results = {spec};
    absl::StatusOr<CallResult> r = (*client)->Call(half, o);
    ASSERT_TRUE(r.ok()) << r.status();
    const uint8_t* y = r->results[0].as<uint8_t>();
    for (int64_t i = 0; i < kN; ++i) {
      ASSERT_EQ(y[i], i < kN / 2 ? 7 : 0) << "round " << round << ", byte " << i;
    }
  }
}

TEST(ResultZeroingTest, WhatAHandlerLeavesUnwrittenIsZeroNotAnEarlierCallsBytes) {
  ExpectUnwrittenResultsZeroed(/*shared_memory=*/false);
}

TEST(ResultZeroingTest, SoOnADeviceAgentOverSharedMemory) {
  if (BinaryPath("FARCALL_TEST_PLATFORM", "cpu") == "cpu") {
    GTEST_SKIP() << "on cpu a shared-memory result is the caller's own memory, left as the "
                    "caller had it; device memory is checked with FARCALL_TEST_PLATFORM=cuda "
                    "(tests/gpu/run_device_checks.sh)";
  }
  ExpectUnwrittenResultsZeroed(/*shared_memory=*/true);
}

}  // namespace
}  // namespace farcall
