#include "core/metrics.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace farcall::metrics {
namespace {

using ::testing::HasSubstr;

TEST(MetricsTest, FamiliesRenderWithLabelsAndHelp) {
  CounterFamily calls("farcall_test_calls_total", "Calls in this test.",
                      {"handler", "code"});
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

TEST(MetricsTest, BadAddressIsAnError) {
  auto server = MetricsServer::Start("not-an-address:99999");
  EXPECT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace farcall::metrics
