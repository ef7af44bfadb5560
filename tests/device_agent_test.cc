// Device agents end to end, for what holds on any host: an agent whose
// platform has no device here exits at once, non-zero, with a message that
// names the platform and says no device was found (what CI sees for cuda
// and rocm); one whose platform has a device serves it and describes it.

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/ucx_exchange.h"
#include "farcall/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/process_harness.h"

namespace farcall {
namespace {

using ::testing::HasSubstr;

::farcall::testing::CommandResult RunAgent(const std::string& args) {
  return ::farcall::testing::RunCommand(absl::StrCat(FARCALL_AGENT_BIN, " ", args));
}

class DeviceAgentTest : public ::testing::TestWithParam<std::string> {};
// A build without device backends (the sanitizer build) has no platform to
// run it for.
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(DeviceAgentTest);

TEST_P(DeviceAgentTest, ServesItsDevicesOrExitsCleanlyWithoutOne) {
  const std::string& platform = GetParam();
  absl::StatusOr<std::string> problem =
      ::farcall::testing::DeviceProblem(FARCALL_AGENT_BIN, platform);
  ASSERT_TRUE(problem.ok()) << problem.status();
  if (problem->empty()) {
    // A device is here: the agent serves on a port of its own.
    auto agent = ::farcall::testing::ChildProcess::Start(
        FARCALL_AGENT_BIN, {absl::StrCat("--platform=", platform), "--listen=127.0.0.1:0"});
    ASSERT_TRUE(agent.ok()) << agent.status();
    EXPECT_GT((*agent)->port(), 0);
    return;
  }
  // No device: serving fails before it binds a port, with a clear message.
  ::farcall::testing::CommandResult r =
      RunAgent(absl::StrCat("--platform=", platform, " --listen=127.0.0.1:0"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output,
              HasSubstr(absl::StrCat("FAILED_PRECONDITION: ", platform, ": no device found")));
  EXPECT_THAT(r.output, HasSubstr(absl::StrCat("cannot serve platform '", platform, "'")));
  std::printf("no %s device here, as expected in CI: %s", platform.c_str(), r.output.c_str());
}

TEST(DeviceAgentFlagsTest, DevicesOutOfRangeAreRefusedByName) {
  ::farcall::testing::CommandResult r = RunAgent("--platform=cpu --devices=3 --listen=127.0.0.1:0");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("INVALID_ARGUMENT: --devices names cpu device 3, but "
                                  "this host has 1 (ordinals 0 to 0)."));
  r = RunAgent("--platform=cpu --devices=zero");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--devices takes device ordinals such as 0,1; got 'zero'"));
}

TEST(DeviceAgentFlagsTest, LimitsOutOfRangeAreRefusedAtStart) {
  // 4 GiB once became 0 when it was truncated to gRPC's int.
  for (const std::string& bin :
       {FARCALL_AGENT_BIN + " --listen=127.0.0.1:0",
        FARCALL_ROUTER_BIN + " --listen=127.0.0.1:0 --agents=127.0.0.1:1"}) {
    ::farcall::testing::CommandResult r =
        ::farcall::testing::RunCommand(absl::StrCat(bin, " --max_message_bytes=4294967296"));
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_THAT(r.output, HasSubstr("INVALID_ARGUMENT: --max_message_bytes must be between "
                                    "1048576 and 2147483647; got 4294967296."));
    r = ::farcall::testing::RunCommand(absl::StrCat(bin, " --max_tensors=0"));
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_THAT(r.output, HasSubstr("--max_tensors must be positive; got 0."));
  }
}

TEST(DeviceAgentFlagsTest, AUcxEndpointCapBelowOneIsRefusedAtStart) {
  ::farcall::testing::CommandResult r = ::farcall::testing::RunCommand(
      FARCALL_AGENT_BIN + " --listen=127.0.0.1:0 --ucx_max_endpoints=0");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output,
              HasSubstr("INVALID_ARGUMENT: --ucx_max_endpoints must be at least 1; got 0."));
}

// Built with UCX, an agent offers it by default (--transports names it);
// built without (scripts/check_without_ucx.sh), it offers none, and asking
// for it stops the agent at start.
TEST(DeviceAgentFlagsTest, AnAgentOffersUcxExactlyWhenItWasBuiltWithIt) {
  absl::StatusOr<std::unique_ptr<::farcall::testing::ChildProcess>> agent =
      ::farcall::testing::ChildProcess::Start(FARCALL_AGENT_BIN, {"--listen=127.0.0.1:0"});
  ASSERT_TRUE(agent.ok()) << agent.status();
  auto client = Client::Connect((*agent)->address());
  ASSERT_TRUE(client.ok()) << client.status();
  absl::StatusOr<AgentDescription> info = (*client)->Describe();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->offers_ucx, client_internal::UcxBuiltIn());
  if (client_internal::UcxBuiltIn()) return;  // ucx_test covers --transports=ucx
  ::farcall::testing::CommandResult r = ::farcall::testing::RunCommand(
      FARCALL_AGENT_BIN + " --listen=127.0.0.1:0 --transports=grpc,ucx");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("INVALID_ARGUMENT: --transports=ucx: this agent was built "
                                  "without UCX; use grpc,shm."));
}

TEST(DeviceAgentFlagsTest, ListDevicesNamesTheCpu) {
  ::farcall::testing::CommandResult r = RunAgent("--platform=cpu --list_devices");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("cpu device 0: "));
}

std::vector<std::string> BuiltDevicePlatforms() {
  std::vector<std::string> out;
  for (absl::string_view p : absl::StrSplit(FARCALL_BUILT_PLATFORMS, ',')) {
    if (p != "cpu") out.emplace_back(p);
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(BuiltPlatforms, DeviceAgentTest,
                         ::testing::ValuesIn(BuiltDevicePlatforms()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace farcall
