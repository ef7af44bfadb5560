#include "core/log.h"

#include <algorithm>
#include <string>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "gmock/gmock.h"
#include "grpc/support/log.h"
#include "gtest/gtest.h"

ABSL_DECLARE_FLAG(std::string, log_level);
ABSL_DECLARE_FLAG(std::string, log_format);

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

TEST(LogTest, FormatsAreCheckedAndJsonLinesCarryTheCall) {
  absl::SetFlag(&FLAGS_log_format, "xml");
  absl::Status s = InitFromFlags("log_test");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "--log_format must be text or json; got 'xml'.");
  absl::SetFlag(&FLAGS_log_format, "json");
  ASSERT_TRUE(InitFromFlags("log_test").ok());
  ::testing::internal::CaptureStderr();
  Write(Level::kWarning, "call 7 failed: \"boom\"\n",
        {"7", "copy", "token:0123456789ab", "", "INTERNAL"});
  Debug("not written at info");
  const std::string line = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(line,
              ::testing::MatchesRegex(
                  "\\{\"time\":\"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}\\.[0-9]{6}Z\","
                  "\"level\":\"warning\",\"binary\":\"log_test\","
                  "\"message\":\"call 7 failed: \\\\\"boom\\\\\"\\\\n\","
                  "\"call_id\":\"7\",\"handler\":\"copy\",\"principal\":\"token:0123456789ab\","
                  "\"code\":\"INTERNAL\"\\}\n"));
  absl::SetFlag(&FLAGS_log_format, "text");
  ASSERT_TRUE(InitFromFlags("log_test").ok());
}

// gRPC writes a line per failed connection; a peer retrying every second
// must not write one each time: one line per place in gRPC's source per
// 10 s, and the next one says how many were left out.
TEST(LogTest, GrpcLinesFromOnePlaceAreRateLimited) {
  absl::SetFlag(&FLAGS_log_level, "info");
  ASSERT_TRUE(InitFromFlags("log_test").ok());
  gpr_set_log_verbosity(GPR_LOG_SEVERITY_ERROR);  // what grpc_init sets by default
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 100; ++i) gpr_log(GPR_ERROR, "handshake failed %d", i);
  gpr_log(GPR_ERROR, "another place");
  const std::string text = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(text, HasSubstr("handshake failed 0"));
  EXPECT_THAT(text, ::testing::Not(HasSubstr("handshake failed 1")));
  EXPECT_THAT(text, HasSubstr("another place"));
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 2) << text;
}

// Once the interval has passed, the next line from a place says how many
// from there were left out; lines below the level are not counted.
TEST(LogTest, TheNextGrpcLineSaysHowManyWereLeftOut) {
  absl::SetFlag(&FLAGS_log_level, "info");
  ASSERT_TRUE(InitFromFlags("log_test").ok());
  gpr_set_log_verbosity(GPR_LOG_SEVERITY_DEBUG);
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 6; ++i) {
    if (i == 5) SetGrpcLineIntervalForTest(absl::ZeroDuration());
    gpr_log(GPR_ERROR, "connect failed %d", i);
    gpr_log(GPR_DEBUG, "below the level %d", i);
  }
  SetGrpcLineIntervalForTest(absl::Seconds(10));
  gpr_set_log_verbosity(GPR_LOG_SEVERITY_ERROR);
  const std::string text = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(text, HasSubstr("connect failed 0"));
  EXPECT_THAT(text,
              HasSubstr("connect failed 5 (and 4 more from here since the last line, left out)"));
  EXPECT_THAT(text, ::testing::Not(HasSubstr("below the level")));
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 2) << text;
}

// A caller chooses handler and platform names, which reach log lines: a
// newline in one must not start a line of its own (a forged log entry).
TEST(LogTest, TextLinesEscapeControlCharacters) {
  EXPECT_EQ(EscapeControl("handler 'a\n[info] forged' \\ \r\t\x01\x7f é"),
            "handler 'a\\n[info] forged' \\\\ \\r\\t\\x01\\x7f é");
  ASSERT_TRUE(InitFromFlags("log_test").ok());
  ::testing::internal::CaptureStderr();
  Warning("call of handler 'x\n[2026-01-01] [farcall-agent] [info] forged' failed");
  const std::string out = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
  EXPECT_THAT(out, ::testing::HasSubstr("'x\\n[2026-01-01] [farcall-agent] [info] forged'"));
}

TEST(LogTest, JsonEscapeKeepsUtf8AndReplacesWhatIsNot) {
  EXPECT_EQ(JsonEscape("plain"), "plain");
  EXPECT_EQ(JsonEscape("a\"b\\c"), "a\\\"b\\\\c");
  EXPECT_EQ(JsonEscape(std::string("\x01\t\x7f", 3)), "\\u0001\\t\\u007f");
  EXPECT_EQ(JsonEscape("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x99\x82"),
            "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x99\x82");
  // A lone continuation byte, a truncated sequence, an overlong '/', a
  // surrogate, and past U+10FFFF: each byte becomes U+FFFD.
  EXPECT_EQ(JsonEscape("\x80"), "\xef\xbf\xbd");
  EXPECT_EQ(JsonEscape("\xe2\x82"), "\xef\xbf\xbd\xef\xbf\xbd");
  EXPECT_EQ(JsonEscape("\xc0\xaf"), "\xef\xbf\xbd\xef\xbf\xbd");
  EXPECT_EQ(JsonEscape("\xed\xa0\x80"), "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
  EXPECT_EQ(JsonEscape("\xf4\x90\x80\x80"), "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
}

TEST(LogTest, PrintableCallIdsAreBoundedAndNumberedWhenMissing) {
  EXPECT_EQ(PrintableCallId("abc\n"), "abc?");
  EXPECT_EQ(PrintableCallId(std::string(100, 'x')).size(), 64u);
  const std::string a = PrintableCallId(""), b = PrintableCallId("");
  EXPECT_EQ(a[0], '#');
  EXPECT_NE(a, b);
}

}  // namespace
}  // namespace farcall::log
