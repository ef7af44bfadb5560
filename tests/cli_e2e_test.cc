// End to end: the `farcall` command-line tool against real servers.

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/process_harness.h"

namespace farcall {
namespace {

using ::farcall::testing::ChildProcess;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;

using testing::CommandResult;

CommandResult Farcall(const std::string& args) {
  return testing::RunCommand(absl::StrCat(FARCALL_CLI_BIN, " ", args));
}

class CliTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto procs = testing::StartAgentAndRouter(FARCALL_AGENT_BIN, FARCALL_ROUTER_BIN);
    ASSERT_TRUE(procs.ok()) << procs.status();
    procs_ = procs->release();
    agent_ = procs_->agent.get();
    router_ = procs_->router.get();
  }
  static void TearDownTestSuite() { delete procs_; }
  static std::string Target() { return absl::StrCat("--target=", router_->address()); }

  static testing::AgentAndRouter* procs_;
  static ChildProcess* agent_;
  static ChildProcess* router_;
};
testing::AgentAndRouter* CliTest::procs_ = nullptr;
ChildProcess* CliTest::agent_ = nullptr;
ChildProcess* CliTest::router_ = nullptr;

TEST_F(CliTest, AxpyInPlacePrintsInputsAndResult) {
  // A directory that does not exist yet: the CLI makes it.
  std::string dir = absl::StrCat(::testing::TempDir(), "/cli_out_", getpid(), "/a/b");
  CommandResult r = Farcall(absl::StrCat("call axpy 'float32[4]:iota' 'float32[4]:ones' ",
                                         "--results='float32[4]' --aliases=1:0 --attr=alpha=2.0 ",
                                         "--out_dir=", dir, " ", Target()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("args[0]    float32[4] [0, 1, 2, 3]"));
  EXPECT_THAT(r.output, HasSubstr("args[1]    float32[4] [1, 1, 1, 1]  (aliased to results[0])"));
  EXPECT_THAT(r.output,
              HasSubstr("results[0] float32[4] [1, 3, 5, 7]  (written in place into args[1])"));
  std::ifstream npy(dir + "/result0.npy", std::ios::binary);
  EXPECT_TRUE(npy.good());
}

TEST(CliAgentFlagsTest, DisabledHandlersAreNotServed) {
  auto agent = ChildProcess::Start(FARCALL_AGENT_BIN,
                                   {"--listen=127.0.0.1:0", "--disable_handlers=sleep,fail"});
  ASSERT_TRUE(agent.ok()) << agent.status();
  const std::string target = absl::StrCat("--target=", (*agent)->address());
  CommandResult r = Farcall(absl::StrCat("describe ", target));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("axpy"));
  EXPECT_THAT(r.output, ::testing::Not(HasSubstr("sleep")));
  r = Farcall(absl::StrCat("call sleep --results='' --attr=ms=1 ", target));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output,
              HasSubstr("NOT_FOUND: handler 'sleep' is not registered for platform 'cpu'."));
  r = testing::RunCommand(
      absl::StrCat(FARCALL_AGENT_BIN, " --listen=127.0.0.1:0 --disable_handlers=slep"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--disable_handlers names 'slep'"));
}

TEST(CliAgentFlagsTest, TransportsNameWhatTheAgentOffers) {
  auto agent =
      ChildProcess::Start(FARCALL_AGENT_BIN, {"--listen=127.0.0.1:0", "--transports=grpc"});
  ASSERT_TRUE(agent.ok()) << agent.status();
  const std::string target = absl::StrCat("--target=", (*agent)->address());
  // No shared memory offered: asked for, it is refused; auto goes over gRPC.
  CommandResult r = Farcall(
      absl::StrCat("call copy 'float32[4]' --results='float32[4]' --transport=shm ", target));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("FAILED_PRECONDITION: transport shm: the target is not an "
                                  "agent on this host that offers shared memory"));
  r = Farcall(absl::StrCat("call copy 'float32[4]' --results='float32[4]' ", target));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("unary Call"));
  for (const auto& [flag, message] : std::vector<std::pair<std::string, std::string>>{
           {"shm", "--transports must include grpc"},
           {"grpc,tcp",
            "--transports takes grpc and shm (and ucx in builds with UCX); got 'tcp'"}}) {
    r = testing::RunCommand(
        absl::StrCat(FARCALL_AGENT_BIN, " --listen=127.0.0.1:0 --transports=", flag));
    EXPECT_EQ(r.exit_code, 2) << r.output;  // a bad flag
    EXPECT_THAT(r.output, HasSubstr(message)) << flag;
  }
}

TEST(CliAgentFlagsTest, CallsEndAtTheAgentsLimitWhateverTheirDeadline) {
  auto agent =
      ChildProcess::Start(FARCALL_AGENT_BIN, {"--listen=127.0.0.1:0", "--max_call_seconds=0.5"});
  ASSERT_TRUE(agent.ok()) << agent.status();
  // The client allows an hour; the agent stops the call after half a second.
  CommandResult r =
      Farcall(absl::StrCat("call sleep --results='' --attr=ms=600000 --timeout_s=3600 ",
                           "--target=", (*agent)->address()));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("DEADLINE_EXCEEDED: the call ran past this agent's limit of "
                                  "500ms per call (--max_call_seconds)."));
}

TEST_F(CliTest, ErrorsPrintCodeAndMessageAndExitNonZero) {
  CommandResult r = Farcall(
      absl::StrCat("call copy 'float32[4]' --results='float32[4]' --platform=tpu ", Target()));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(
      r.output,
      HasSubstr("farcall: INVALID_ARGUMENT: `buffer_callback` not supported on tpu backend."));
  r = Farcall(absl::StrCat("call nope 'float32[4]' --results='float32[4]' ", Target()));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("farcall: NOT_FOUND: handler 'nope' is not registered"));
}

TEST_F(CliTest, TransportRpcAndBusyPollFlagsTakeOnlyTheirValues) {
  const std::string call = absl::StrCat("call copy 'float32[4]' --results='float32[4]' ", Target());
  CommandResult r = Farcall(call + " --transport=unary");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("farcall: INVALID_ARGUMENT: --transport must be auto, grpc, shm "
                                  "or ucx; got 'unary' (the RPC's shape is --rpc=unary)."));
  r = Farcall(call + " --rpc=fast");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("--rpc must be auto, unary or stream; got 'fast'."));
  r = Farcall(call + " --transport=grpc --rpc=stream");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("streamed Execute"));
  r = Farcall(absl::StrCat("bench --bytes=64 --calls=2 --transport=carrier-pigeon ", Target()));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("--transport must be auto, grpc, shm or ucx"));
  r = Farcall(call + " --busy_poll_us=-5");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("farcall: INVALID_ARGUMENT: --busy_poll_us must be 0 to "
                                  "1000000; got -5."));
  r = Farcall(absl::StrCat("bench --bytes=64 --calls=20 --busy_poll_us=300 ", Target()));
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST_F(CliTest, AgentsTableShowsTheAgent) {
  CommandResult r = Farcall(absl::StrCat("agents ", Target()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr(agent_->address()));
  EXPECT_THAT(r.output, HasSubstr("SERVING"));
}

TEST_F(CliTest, HealthOfRouterAndAgent) {
  EXPECT_EQ(Farcall(absl::StrCat("health ", Target())).exit_code, 0);
  EXPECT_EQ(Farcall(absl::StrCat("health --target=", agent_->address())).exit_code, 0);
  CommandResult down = Farcall("health --target=127.0.0.1:1");
  EXPECT_EQ(down.exit_code, 1);
  EXPECT_THAT(down.output, HasSubstr("UNAVAILABLE"));
}

TEST_F(CliTest, BenchChecksResultsAndEndsWithJson) {
  CommandResult r = Farcall(
      absl::StrCat("bench --bytes=100000 --calls=20 --concurrency=2 --alias --json ", Target()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::string last = r.output.substr(r.output.rfind('{'));
  EXPECT_THAT(last, HasSubstr("\"calls\": 20"));
  EXPECT_THAT(last, HasSubstr("\"bytes_per_call\": 100000"));
  EXPECT_THAT(last,
              MatchesRegex(".*\"p50_us\": [0-9.]+, \"p90_us\": [0-9.]+, \"p99_us\": [0-9.]+.*\n"));
}

}  // namespace
}  // namespace farcall
