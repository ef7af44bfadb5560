// End to end: agents and the router export Prometheus metrics that count
// real calls, scraped over HTTP as Prometheus would.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "farcall/client.h"
#include "farcall/v1/farcall.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpc/grpc.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/process_harness.h"
#include "tests/test_calls.h"

namespace farcall {
namespace {

using ::farcall::testing::ChildProcess;
using ::testing::HasSubstr;

// The /metrics page on 127.0.0.1:port.
std::string Scrape(int port) { return ::farcall::testing::HttpGet(port, "/metrics"); }

// Reads one sample, such as farcall_agent_inflight_bytes.
double Sample(const std::string& text, const std::string& name) {
  return ::farcall::testing::MetricValue(text, name);
}

// Through the router, so that it counts the call and its bytes.
absl::StatusOr<CallResult> Copy(Client& client, const std::string& handler) {
  CallOptions o;
  o.via_router = true;
  return testing::CallOnFour(client, handler, o);
}

TEST(MetricsEndToEndTest, AgentAndRouterCountCalls) {
  auto agent = ChildProcess::Start(FARCALL_AGENT_BIN,
                                   {"--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0"});
  ASSERT_TRUE(agent.ok()) << agent.status();
  ASSERT_GT((*agent)->metrics_port(), 0);
  auto router = ChildProcess::Start(FARCALL_ROUTER_BIN,
                                    {"--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0",
                                     absl::StrCat("--agents=", (*agent)->address())});
  ASSERT_TRUE(router.ok()) << router.status();
  ASSERT_GT((*router)->metrics_port(), 0);

  auto client = Client::Connect((*router)->address());
  ASSERT_TRUE(client.ok());
  ASSERT_TRUE(Copy(**client, "copy").ok());
  ASSERT_TRUE(Copy(**client, "copy").ok());
  EXPECT_EQ(Copy(**client, "nope").status().code(), absl::StatusCode::kNotFound);

  const std::string a = Scrape((*agent)->metrics_port());
  EXPECT_THAT(a, HasSubstr("farcall_agent_calls_total{code=\"OK\",handler=\"copy\","
                           "platform=\"cpu\",tenant=\"-\"} 2"));
  EXPECT_THAT(a, HasSubstr("farcall_agent_received_bytes_total{platform=\"cpu\",tenant=\"-\"} 32"));
  EXPECT_THAT(a, HasSubstr("farcall_agent_execute_seconds_count{handler=\"copy\","
                           "platform=\"cpu\",tenant=\"-\"} 2"));
  // The whole call, which the SLO reads.
  EXPECT_THAT(a, HasSubstr("farcall_agent_call_seconds_count{handler=\"copy\","
                           "platform=\"cpu\",tenant=\"-\"} 2"));
  EXPECT_THAT(a, HasSubstr("farcall_agent_inflight_calls 0"));
  // Series that dashboards and alerts read are there from the start.
  for (const char* series :
       {"farcall_agent_budget_bytes ",
        "farcall_agent_refused_calls_total{reason=\"auth\",tenant=\"-\"} 0",
        "farcall_agent_refused_calls_total{reason=\"limit\",tenant=\"-\"} 0",
        "farcall_agent_device_memory_total_bytes{device=\"0\"} ",
        "farcall_agent_device_memory_used_bytes{device=\"0\"} ",
        "farcall_agent_graph_cache_misses_total 0", "farcall_agent_staging_fallbacks_total 0",
        "farcall_agent_shm_regions ", "farcall_agent_draining 0",
        "farcall_build_info{binary=\"farcall-agent\",version=\""}) {
    EXPECT_THAT(a, HasSubstr(series));
  }
  // The process's own, for the dashboard's process row: read from /proc.
  const double now = absl::ToUnixSeconds(absl::Now());
  EXPECT_GT(Sample(a, "process_resident_memory_bytes"), 1 << 20);
  EXPECT_GT(Sample(a, "process_cpu_seconds_total"), 0);
  EXPECT_LE(Sample(a, "process_start_time_seconds"), now + 2);
  EXPECT_GT(Sample(a, "process_start_time_seconds"), now - 600);

  const std::string r = Scrape((*router)->metrics_port());
  EXPECT_THAT(r, HasSubstr("farcall_router_calls_total{code=\"OK\",handler=\"copy\","
                           "platform=\"cpu\",tenant=\"-\"} 2"));
  // An unknown handler is answered by the router itself, and its name does
  // not become a label value.
  EXPECT_THAT(r, HasSubstr("farcall_router_calls_total{code=\"NOT_FOUND\",handler=\"-\","
                           "platform=\"-\",tenant=\"-\"} 1"));
  EXPECT_THAT(r, HasSubstr(absl::StrCat("farcall_router_agent_up{agent=\"", (*agent)->address(),
                                        "\",platform=\"cpu\"} 1")));
  // Once described, an agent is exported under its platform only.
  EXPECT_THAT(r, ::testing::Not(HasSubstr("platform=\"\"}")));
  EXPECT_THAT(r, HasSubstr("farcall_router_retries_total{platform=\"cpu\"} 0"));
  EXPECT_THAT(r,
              HasSubstr("farcall_router_refused_calls_total{reason=\"no_agent\",tenant=\"-\"} 1"));
  EXPECT_THAT(r, HasSubstr("farcall_router_refused_calls_total{reason=\"auth\",tenant=\"-\"} 0"));
  EXPECT_THAT(r, HasSubstr("farcall_router_draining 0"));
  EXPECT_GT(Sample(r, "farcall_router_received_bytes_total{platform=\"cpu\",tenant=\"-\"}"), 32);
  EXPECT_GT(Sample(r, "farcall_router_sent_bytes_total{platform=\"cpu\",tenant=\"-\"}"), 32);

  // The status page and its JSON, on the same port.
  const std::string json = ::farcall::testing::HttpGet((*router)->metrics_port(), "/status.json");
  EXPECT_THAT(json, HasSubstr(absl::StrCat("\"address\":\"", (*agent)->address(), "\"")));
  EXPECT_THAT(json, HasSubstr("\"health\":\"SERVING\""));
  EXPECT_THAT(json, HasSubstr("\"calls_total\":2"));
  EXPECT_THAT(json, HasSubstr("\"last_call_error\":null"));
  EXPECT_THAT(::farcall::testing::HttpGet((*router)->metrics_port(), "/"),
              HasSubstr("<title>farcall router</title>"));
  EXPECT_THAT(::farcall::testing::HttpGet((*router)->metrics_port(), "/nope"),
              HasSubstr("no page /nope"));

  // A call that goes to the agent directly: the router counts the Resolve
  // (refused ones without names), the agent the call.
  ASSERT_TRUE(testing::CallOnFour(**client).ok());
  EXPECT_FALSE(testing::CallOnFour(**client, "nope").ok());
  const std::string after = Scrape((*router)->metrics_port());
  EXPECT_THAT(after, HasSubstr("farcall_router_resolves_total{code=\"OK\",handler=\"copy\","
                               "platform=\"cpu\"} 1"));
  EXPECT_THAT(after, HasSubstr("farcall_router_resolves_total{code=\"NOT_FOUND\",handler=\"-\","
                               "platform=\"-\"} 1"));
  EXPECT_THAT(after, HasSubstr("farcall_router_calls_total{code=\"OK\",handler=\"copy\","
                               "platform=\"cpu\",tenant=\"-\"} 2"));
  EXPECT_THAT(Scrape((*agent)->metrics_port()),
              HasSubstr("farcall_agent_calls_total{code=\"OK\",handler=\"copy\","
                        "platform=\"cpu\",tenant=\"-\"} 3"));
}

TEST(MetricsEndToEndTest, CancelledCallFreesItsMemoryAtOnce) {
  auto agent = ChildProcess::Start(FARCALL_AGENT_BIN,
                                   {"--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0"});
  ASSERT_TRUE(agent.ok()) << agent.status();
  auto channel = grpc::CreateChannel((*agent)->address(), grpc::InsecureChannelCredentials());
  auto stub = v1::Agent::NewStub(channel);
  grpc::ClientContext ctx;
  auto stream = stub->Execute(&ctx);
  // A 64 MiB copy whose upload stops after one chunk.
  v1::ExecuteRequest req;
  v1::CallHeader* h = req.mutable_header();
  h->set_handler("copy");
  h->add_platforms("cpu");
  v1::TensorSpec spec;
  spec.set_dtype(v1::U8);
  spec.add_dims(64 << 20);
  *h->add_args() = spec;
  *h->add_results() = spec;
  v1::Chunk* c = req.add_chunks();
  c->set_data(std::string(1 << 20, 'x'));
  ASSERT_TRUE(stream->Write(req));
  // The agent admitted the call: it holds args and result, and the call's
  // own overhead (4 KiB a call, 512 bytes a tensor).
  const double kFootprint = 2.0 * (64 << 20) + 4096 + 2 * 512;
  double held = 0;
  absl::Time deadline = absl::Now() + absl::Seconds(10);
  while ((held = Sample(Scrape((*agent)->metrics_port()), "farcall_agent_inflight_bytes")) <
             kFootprint &&
         absl::Now() < deadline) {
  }
  EXPECT_EQ(held, kFootprint);
  ctx.TryCancel();
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::CANCELLED);
  // Freed without waiting for anything else to happen on the agent.
  deadline = absl::Now() + absl::Seconds(10);
  while ((held = Sample(Scrape((*agent)->metrics_port()), "farcall_agent_inflight_bytes")) != 0 &&
         absl::Now() < deadline) {
  }
  EXPECT_EQ(held, 0);
  EXPECT_EQ(Sample(Scrape((*agent)->metrics_port()), "farcall_agent_inflight_calls"), 0);
}

TEST(MetricsEndToEndTest, AgentRefusesBadMetricsAddress) {
  auto agent = ChildProcess::Start(FARCALL_AGENT_BIN,
                                   {"--listen=127.0.0.1:0", "--metrics_listen=256.1.1.1:1"});
  EXPECT_FALSE(agent.ok());
}

}  // namespace
}  // namespace farcall

int main(int argc, char** argv) {
  grpc_init();  // for the whole run, as in conformance_test
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
