#include "core/refusal_audit.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace farcall {
namespace {

using ::testing::HasSubstr;

// An audit of 10 s intervals on a clock the test moves; each Flush is
// taken to end a whole interval unless the test moves the clock itself.
struct Lines {
  std::vector<std::string> lines;
  absl::Time now = absl::FromUnixSeconds(1000);
  RefusalAudit audit{
      absl::Seconds(10),
      [this](const std::string& line, const RefusalAudit::Refusal&) { lines.push_back(line); },
      [this] { return now; }};
  void EndInterval() {
    now += absl::Seconds(10);
    audit.Flush();
  }
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
  l.EndInterval();
  ASSERT_EQ(l.lines.size(), 2u);
  EXPECT_EQ(l.lines[1], "audit: 3999 more refusals (auth) from ipv4:10.0.0.7 by - in the last 10s");
  // A quiet interval writes nothing; the next refusal is logged at once.
  l.EndInterval();
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
  l.EndInterval();
  ASSERT_EQ(l.lines.size(), 5u);
  EXPECT_EQ(l.lines[4],
            "audit: 1 more refusals (limit) from ipv4:10.0.0.7 by tenant:a in the last 10s");
}

// Callers past kMaxKeys in one interval are counted per reason, not kept.
TEST(RefusalAuditTest, KeysAreBounded) {
  Lines l;
  for (size_t i = 0; i < RefusalAudit::kMaxKeys + 500; ++i) {
    const std::string tenant = "tenant:t" + std::to_string(i);
    l.audit.Note({"ipv6:[fd00::1]:5", tenant, "auth", "copy", "PERMISSION_DENIED", "no"});
  }
  EXPECT_EQ(l.lines.size(), RefusalAudit::kMaxKeys);
  l.EndInterval();
  EXPECT_THAT(l.lines.back(),
              HasSubstr("audit: 500 refusals (auth) from callers past the first kept"));
}

// Unknown callers (keyed by an address they may vary) fill at most half the
// keys: a known caller refused after a flood from 2,000 addresses still has
// a line of its own.
TEST(RefusalAuditTest, UnknownCallersCannotCrowdOutKnownOnes) {
  Lines l;
  for (int i = 0; i < 2000; ++i) {
    l.audit.Note(
        BadToken("ipv4:10.0." + std::to_string(i / 256) + "." + std::to_string(i % 256) + ":5"));
  }
  EXPECT_EQ(l.lines.size(), RefusalAudit::kMaxAnonymousKeys);
  l.audit.Note({"ipv4:10.9.9.9:1", "tenant:a", "auth", "axpy", "PERMISSION_DENIED", "no"});
  ASSERT_EQ(l.lines.size(), RefusalAudit::kMaxAnonymousKeys + 1);
  EXPECT_THAT(l.lines.back(), HasSubstr("from ipv4:10.9.9.9 by tenant:a"));
  l.EndInterval();
  EXPECT_THAT(l.lines.back(), HasSubstr("audit: 1488 refusals (auth) from callers past the first "
                                        "kept (1024 in all, 512 unknown) in the last 10s"));
}

// The count line names the time its interval ran: at exit, less than the
// interval.
TEST(RefusalAuditTest, TheCountLineNamesTheTimeItCovers) {
  Lines l;
  l.audit.Note(BadToken("ipv4:10.0.0.7:1"));
  l.audit.Note(BadToken("ipv4:10.0.0.7:1"));
  l.now += absl::Milliseconds(2300);
  l.audit.Flush();
  EXPECT_EQ(l.lines.back(), "audit: 1 more refusals (auth) from ipv4:10.0.0.7 by - in the last 3s");
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
