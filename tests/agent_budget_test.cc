// The agent's byte budget for calls in flight (--max_inflight_bytes): calls
// that could never fit are refused, the others wait their turn. Run once per
// platform built (FARCALL_TEST_PLATFORM).
#include <cstring>
#include <future>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "farcall/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/process_harness.h"
#include "tests/test_platform.h"

namespace farcall {
namespace {

using ::farcall::testing::AgentArgs;
using ::farcall::testing::ChildProcess;
using ::farcall::testing::TestPlatform;
using ::testing::HasSubstr;

// ---- Memory budget ------------------------------------------------------------

TEST(AgentBudgetTest, CallsThatCouldNeverFitAreRefused) {
  SKIP_WITHOUT_DEVICE();
  std::vector<std::string> args = AgentArgs();
  args.push_back("--max_inflight_bytes=1048576");
  auto a = ChildProcess::Start(FARCALL_AGENT_BIN, args);
  ASSERT_TRUE(a.ok()) << a.status();
  auto client = Client::Connect((*a)->address());
  ASSERT_TRUE(client.ok());
  std::vector<uint8_t> x(600 << 10, 1);  // args + result: 1.2 MiB
  TensorSpec spec{DType::kU8, {static_cast<int64_t>(x.size())}};
  CallRequest req;
  req.platform = TestPlatform();
  req.handler = "copy";
  req.args = {Arg::In(spec, x.data())};
  req.results = {spec};
  CallOptions o;
  o.allow_shm = false;
  auto r = (*client)->Call(req, o);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(r.status().message(), HasSubstr("over the agent's budget of 1048576 bytes"));
  EXPECT_THAT(r.status().message(), HasSubstr("it can never run here"));
  // A call that fits still runs.
  x.resize(100 << 10);
  spec.dims = {static_cast<int64_t>(x.size())};
  req.args = {Arg::In(spec, x.data())};
  req.results = {spec};
  EXPECT_TRUE((*client)->Call(req, o).ok());
}

TEST(AgentBudgetTest, CallsPastTheBudgetWaitTheirTurnAndAllSucceed) {
  SKIP_WITHOUT_DEVICE();
  // Room for one 2 MiB call (1 MiB arg + 1 MiB result) at a time.
  std::vector<std::string> args = AgentArgs();
  args.push_back("--max_inflight_bytes=3145728");
  auto a = ChildProcess::Start(FARCALL_AGENT_BIN, args);
  ASSERT_TRUE(a.ok()) << a.status();
  auto client = Client::Connect((*a)->address());
  ASSERT_TRUE(client.ok());
  constexpr int kCalls = 16;
  constexpr int64_t kBytes = 1 << 20;
  std::vector<std::vector<uint8_t>> in(kCalls, std::vector<uint8_t>(kBytes));
  std::vector<std::future<absl::StatusOr<CallResult>>> futures;
  for (int c = 0; c < kCalls; ++c) {
    std::fill(in[c].begin(), in[c].end(), static_cast<uint8_t>(c + 1));
    TensorSpec spec{DType::kU8, {kBytes}};
    CallRequest req;
    req.platform = TestPlatform();
    req.handler = "copy";
    req.args = {Arg::In(spec, in[c].data())};
    req.results = {spec};
    CallOptions o;
    o.allow_shm = false;
    o.rpc = c % 2 ? Rpc::kUnary : Rpc::kStream;
    futures.push_back((*client)->CallFuture(req, o));
  }
  for (int c = 0; c < kCalls; ++c) {
    auto r = futures[c].get();
    ASSERT_TRUE(r.ok()) << "call " << c << ": " << r.status();
    EXPECT_EQ(std::memcmp(r->results[0].data, in[c].data(), kBytes), 0) << c;
  }
}

}  // namespace
}  // namespace farcall
