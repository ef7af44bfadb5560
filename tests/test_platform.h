// The platform the integration suites run their agents on, for the suites
// that run once per platform built (tests/CMakeLists.txt): which one, with
// which plugin, the agent flags for it, and why it cannot run here.
// Header only: FARCALL_AGENT_BIN comes from each test's compile definitions.
#ifndef FARCALL_TESTS_TEST_PLATFORM_H_
#define FARCALL_TESTS_TEST_PLATFORM_H_

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tests/process_harness.h"

namespace farcall::testing {

inline constexpr int64_t kAgentMaxCallBytes = int64_t{1} << 30;

// The platform under test: FARCALL_TEST_PLATFORM, cpu by default.
inline const std::string& TestPlatform() {
  static const std::string p = [] {
    const char* e = std::getenv("FARCALL_TEST_PLATFORM");
    return std::string(e != nullptr && *e != '\0' ? e : "cpu");
  }();
  return p;
}

// A supported platform that the agents under test do not serve.
inline std::string OtherPlatform() { return TestPlatform() == "cuda" ? "rocm" : "cuda"; }

// The plugin with "example.negate" for the platform under test, or empty.
inline std::string TestPlugin() {
  const char* e = std::getenv("FARCALL_TEST_PLUGIN");
  if (e != nullptr) return e;
  return TestPlatform() == "cpu" ? FARCALL_EXAMPLE_PLUGIN : "";
}

// Why this platform cannot be tested here ("" when it can): its agent finds
// no device. Asked once, of the agent itself.
inline const std::string& SkipReason() {
  static const std::string reason = [] {
    absl::StatusOr<std::string> why =
        ::farcall::testing::DeviceProblem(FARCALL_AGENT_BIN, TestPlatform());
    // Any other failure is not a reason to skip: the tests then fail on it.
    return why.ok() ? *why : std::string();
  }();
  return reason;
}

// The agent flags for the platform under test: --platform, a port the OS
// picks (argument 1), the plugin, and FARCALL_TEST_AGENT_FLAGS.
inline std::vector<std::string> AgentArgs() {
  std::vector<std::string> args = {absl::StrCat("--platform=", TestPlatform()),
                                   "--listen=127.0.0.1:0",
                                   absl::StrCat("--max_call_bytes=", kAgentMaxCallBytes)};
  if (!TestPlugin().empty()) args.push_back(absl::StrCat("--plugins=", TestPlugin()));
  // More agent flags, space-separated: FARCALL_TEST_AGENT_FLAGS (a GPU run
  // shrinks the staging pool with them, so that calls run out of blocks).
  if (const char* e = std::getenv("FARCALL_TEST_AGENT_FLAGS"); e != nullptr) {
    for (absl::string_view f : absl::StrSplit(e, ' ', absl::SkipEmpty())) {
      args.emplace_back(f);
    }
  }
  return args;
}

}  // namespace farcall::testing

// Skips the test, saying why, when the platform has no device here (ctest
// reports the per-platform runs of such a suite as skipped).
#define SKIP_WITHOUT_DEVICE()                                             \
  if (!::farcall::testing::SkipReason().empty()) {                        \
    GTEST_SKIP() << "SKIPPED: no " << ::farcall::testing::TestPlatform()  \
                 << " device here: " << ::farcall::testing::SkipReason(); \
  }

#endif  // FARCALL_TESTS_TEST_PLATFORM_H_
