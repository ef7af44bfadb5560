#include "server/agent_discovery.h"

#include <utility>

#include "absl/strings/str_cat.h"
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

TEST(AgentDiscoveryTest, EntriesAreCheckedAtStart) {
  for (const char* good : {"agent-0.example:50051", "10.1.2.3:7", "[::1]:50051",
                           "dns:///farcall-agent-cpu:50051", "dns:///[fd00::1]:1"}) {
    EXPECT_TRUE(CheckAgentSource(good).ok()) << good << ": " << CheckAgentSource(good);
  }
  const std::pair<const char*, const char*> bad[] = {
      {"dns://farcall-agent-cpu:50051", "is a dns: name without three slashes"},
      {"http://agent:50051", "has a scheme other than dns:///"},
      {"agent-0.example", "has no host and port"},
      {"dns:///agent", "has no host and port"},
      {"agent:http", "has no port of 1 to 65535"},
      {"agent:0", "has no port of 1 to 65535"},
      {"agent:65536", "has no port of 1 to 65535"},
      {"::1:50051", "has an IPv6 address outside brackets, or no port"},
      {":50051", "has no host and port"},
  };
  for (const auto& [source, why] : bad) {
    absl::Status s = CheckAgentSource(source);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << source;
    EXPECT_EQ(s.message(), absl::StrCat("--agents entry '", source, "' ", why,
                                        "; give HOST:PORT or dns:///NAME:PORT."));
  }
}

TEST(AgentDiscoveryTest, UnresolvableNameIsUnavailable) {
  auto r = ExpandAgentSource("dns:///no-such-host.invalid:50051");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(r.status().message(), HasSubstr("no-such-host.invalid"));
}

}  // namespace
}  // namespace farcall::router
