#include "core/refusal_audit.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace farcall {
namespace {

using ::testing::HasSubstr;

struct Lines {
  std::vector<std::string> lines;
  RefusalAudit audit{
      absl::Seconds(10),
      [this](const std::string& line, const RefusalAudit::Refusal&) { lines.push_back(line); }};
};

RefusalAudit::Refusal BadToken(absl::string_view peer) {
  return {peer, "", "auth", "copy", "UNAUTHENTICATED", "unknown token"};
}

// 4,000 refused calls from one peer give two lines: the first at once, the
// rest as one count when the interval ends.
TEST(RefusalAuditTest, AFloodFromOnePeerIsTwoLines) {
  Lines l;
  for (int i = 0; i < 4000; ++i) {
    l.audit.Note(BadToken("ipv4:10.0.0.7:" + std::to_string(40000 + i % 100)));
  }
  ASSERT_EQ(l.lines.size(), 1u);
  EXPECT_EQ(l.lines[0],
            "audit: refused (auth) call of 'copy' from ipv4:10.0.0.7 by -: UNAUTHENTICATED: "
            "unknown token");
  l.audit.Flush();
  ASSERT_EQ(l.lines.size(), 2u);
  EXPECT_EQ(l.lines[1], "audit: 3999 more refusals (auth) from ipv4:10.0.0.7 by - in the last 10s");
  // A quiet interval writes nothing; the next refusal is logged at once.
  l.audit.Flush();
  EXPECT_EQ(l.lines.size(), 2u);
  l.audit.Note(BadToken("ipv4:10.0.0.7:1"));
  EXPECT_EQ(l.lines.size(), 3u);
}

TEST(RefusalAuditTest, EachPeerPrincipalAndReasonHasItsOwnLine) {
  Lines l;
  l.audit.Note(BadToken("ipv4:10.0.0.7:1"));
  l.audit.Note(BadToken("ipv4:10.0.0.8:1"));
  l.audit.Note({"ipv4:10.0.0.7:2", "tenant:a", "auth", "axpy", "PERMISSION_DENIED", "no"});
  l.audit.Note({"ipv4:10.0.0.7:2", "tenant:a", "limit", "axpy", "RESOURCE_EXHAUSTED", "full"});
  l.audit.Note({"ipv4:10.0.0.7:3", "tenant:a", "limit", "axpy", "RESOURCE_EXHAUSTED", "full"});
  EXPECT_EQ(l.lines.size(), 4u);
  l.audit.Flush();
  ASSERT_EQ(l.lines.size(), 5u);
  EXPECT_EQ(l.lines[4],
            "audit: 1 more refusals (limit) from ipv4:10.0.0.7 by tenant:a in the last 10s");
}

// Callers past kMaxKeys in one interval are counted per reason, not kept.
TEST(RefusalAuditTest, KeysAreBounded) {
  Lines l;
  for (size_t i = 0; i < RefusalAudit::kMaxKeys + 500; ++i) {
    l.audit.Note(BadToken("ipv6:[fd00::" + std::to_string(i) + "]:5"));
  }
  EXPECT_EQ(l.lines.size(), RefusalAudit::kMaxKeys);
  l.audit.Flush();
  EXPECT_THAT(l.lines.back(),
              HasSubstr("audit: 500 refusals (auth) from callers past the first 1024"));
}

TEST(RefusalAuditTest, PeerAddressDropsThePortOnly) {
  EXPECT_EQ(PeerAddress("ipv4:10.0.0.7:41234"), "ipv4:10.0.0.7");
  EXPECT_EQ(PeerAddress("ipv6:[::1]:5"), "ipv6:[::1]");
  EXPECT_EQ(PeerAddress("ipv6:[fd00::1]"), "ipv6:[fd00::1]");
  EXPECT_EQ(PeerAddress("unix:/tmp/s"), "unix:/tmp/s");
  EXPECT_EQ(PeerAddress(""), "");
}

}  // namespace
}  // namespace farcall
