// Client options against real processes.
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

// ---- Client options ------------------------------------------------------------

TEST(ClientOptionsTest, WaitForReadyWaitsForTheTargetUntilTheDeadline) {
  SKIP_WITHOUT_DEVICE();
  // Nothing listens on port 1.
  auto client = Client::Connect("127.0.0.1:1");
  ASSERT_TRUE(client.ok());
  std::vector<float> x = {1};
  TensorSpec spec{DType::kF32, {1}};
  CallRequest req;
  req.platform = TestPlatform();
  req.handler = "copy";
  req.args = {Arg::In(spec, x.data())};
  req.results = {spec};
  CallOptions o;
  o.timeout = absl::Milliseconds(300);
  EXPECT_EQ((*client)->Call(req, o).status().code(), absl::StatusCode::kUnavailable);
  o.wait_for_ready = true;
  EXPECT_EQ((*client)->Call(req, o).status().code(), absl::StatusCode::kDeadlineExceeded);
}

}  // namespace
}  // namespace farcall
