#include "core/log.h"

#include <string>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

ABSL_DECLARE_FLAG(std::string, log_level);

namespace farcall::log {
namespace {

using ::testing::HasSubstr;

TEST(LogTest, LevelsAreCheckedAndApplied) {
  absl::SetFlag(&FLAGS_log_level, "loud");
  absl::Status s = InitFromFlags("log_test");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "--log_level must be debug, info, warning or error; got 'loud'.");
  absl::SetFlag(&FLAGS_log_level, "DEBUG");
  ASSERT_TRUE(InitFromFlags("log_test").ok());
  EXPECT_TRUE(DebugEnabled());
  absl::SetFlag(&FLAGS_log_level, "warning");
  ASSERT_TRUE(InitFromFlags("log_test").ok());
  EXPECT_FALSE(DebugEnabled());
}

TEST(LogTest, NonDefaultFlagsNameOnlyWhatWasSet) {
  absl::SetFlag(&FLAGS_log_level, "info");
  EXPECT_EQ(NonDefaultFlags(), "(all defaults)");
  absl::SetFlag(&FLAGS_log_level, "error");
  EXPECT_THAT(NonDefaultFlags(), HasSubstr("--log_level=error"));
  absl::SetFlag(&FLAGS_log_level, "info");
}

}  // namespace
}  // namespace farcall::log
