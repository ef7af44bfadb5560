#include "core/metrics.h"

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace farcall::metrics {
namespace {

using ::testing::HasSubstr;

TEST(MetricsTest, FamiliesRenderWithLabelsAndHelp) {
  CounterFamily calls("farcall_test_calls_total", "Calls in this test.", {"handler", "code"});
  calls.With({"axpy", "OK"}).Increment();
  calls.With({"axpy", "OK"}).Increment(2);
  calls.With({"copy", "NOT_FOUND"}).Increment();
  GaugeFamily inflight("farcall_test_inflight_calls", "In flight.", {});
  inflight.With({}).Set(5);
  inflight.With({}).Decrement(2);
  HistogramFamily latency("farcall_test_seconds", "Latency.", {"handler"});
  latency.With({"axpy"}).Observe(0.0003);

  std::string text = RenderText();
  EXPECT_THAT(text, HasSubstr("# HELP farcall_test_calls_total Calls in this test."));
  EXPECT_THAT(text, HasSubstr("farcall_test_calls_total{code=\"OK\",handler=\"axpy\"} 3"));
  EXPECT_THAT(text, HasSubstr("farcall_test_calls_total{code=\"NOT_FOUND\",handler=\"copy\"} 1"));
  EXPECT_THAT(text, HasSubstr("farcall_test_inflight_calls 3"));
  EXPECT_THAT(text, HasSubstr("farcall_test_seconds_bucket{handler=\"axpy\",le=\"0.0005\"} 1"));
  EXPECT_THAT(text, HasSubstr("farcall_test_seconds_bucket{handler=\"axpy\",le=\"0.00025\"} 0"));
}

TEST(MetricsTest, ServerBindsPortZero) {
  auto server = MetricsServer::Start("127.0.0.1:0");
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_GT((*server)->port(), 0);
}

// The local address of the listening TCP socket on `port`, from
// /proc/net/tcp ("0100007F" is 127.0.0.1, "00000000" any address).
std::string ListeningAddress(int port) {
  std::ifstream f("/proc/net/tcp");
  std::string line;
  char want[8];
  std::snprintf(want, sizeof(want), ":%04X", port);
  while (std::getline(f, line)) {
    // "  sl  local_address rem_address   st ...": state 0A is LISTEN.
    std::istringstream in(line);
    std::string sl, local, remote, state;
    in >> sl >> local >> remote >> state;
    if (state == "0A" && local.size() > 5 && local.substr(local.size() - 5) == want) {
      return local.substr(0, local.size() - 5);
    }
  }
  return "";
}

TEST(MetricsTest, ABarePortBindsLoopbackOnly) {
  auto server = MetricsServer::Start("0");
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_GT((*server)->port(), 0);
  EXPECT_EQ(ListeningAddress((*server)->port()), "0100007F");
}

TEST(MetricsTest, BadAddressIsAnError) {
  auto server = MetricsServer::Start("not-an-address:99999");
  EXPECT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace farcall::metrics
