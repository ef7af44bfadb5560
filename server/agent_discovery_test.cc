#include "server/agent_discovery.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace farcall::router {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(AgentDiscoveryTest, PlainAddressIsOneAgent) {
  auto r = ExpandAgentSource("agent-0.example:50051");
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(*r, ElementsAre("agent-0.example:50051"));
  EXPECT_FALSE(IsMultiAgentSource("agent-0.example:50051"));
}

TEST(AgentDiscoveryTest, DnsNameExpandsToEveryAddress) {
  EXPECT_TRUE(IsMultiAgentSource("dns:///localhost:50051"));
  auto r = ExpandAgentSource("dns:///localhost:50051");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(*r, Contains("127.0.0.1:50051"));
}

TEST(AgentDiscoveryTest, IpLiteralResolvesToItself) {
  auto r = ExpandAgentSource("dns:///10.1.2.3:7");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(*r, ElementsAre("10.1.2.3:7"));
}

TEST(AgentDiscoveryTest, MissingPortIsInvalid) {
  auto r = ExpandAgentSource("dns:///localhost");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("has no port"));
}

TEST(AgentDiscoveryTest, UnresolvableNameIsUnavailable) {
  auto r = ExpandAgentSource("dns:///no-such-host.invalid:50051");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(r.status().message(), HasSubstr("no-such-host.invalid"));
}

}  // namespace
}  // namespace farcall::router
