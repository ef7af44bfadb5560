// Client options against real processes.
#include "absl/time/time.h"
#include "farcall/client.h"
#include "gtest/gtest.h"
#include "tests/test_calls.h"
#include "tests/test_platform.h"

namespace farcall {
namespace {

using ::farcall::testing::CallOnFour;
using ::farcall::testing::TestPlatform;

// ---- Client options ------------------------------------------------------------

TEST(ClientOptionsTest, WaitForReadyWaitsForTheTargetUntilTheDeadline) {
  SKIP_WITHOUT_DEVICE();
  // Nothing listens on port 1.
  auto client = Client::Connect("127.0.0.1:1");
  ASSERT_TRUE(client.ok());
  CallOptions o;
  o.timeout = absl::Milliseconds(300);
  EXPECT_EQ(CallOnFour(**client, "copy", o, TestPlatform()).status().code(),
            absl::StatusCode::kUnavailable);
  o.wait_for_ready = true;
  EXPECT_EQ(CallOnFour(**client, "copy", o, TestPlatform()).status().code(),
            absl::StatusCode::kDeadlineExceeded);
}

}  // namespace
}  // namespace farcall
