#include "core/capability.h"

#include <cstdio>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace farcall {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kSecret[] = "0123456789abcdef0123456789abcdef";

CapabilityKey Key(const std::string& secret = kSecret) {
  return CapabilityKey::FromSecret(secret, "test").value();
}

Capability Scale(absl::Time expires) { return {"token:0a1b2c3d4e5f", "scale", "cpu-1", expires}; }

TEST(CapabilityTest, AMintedCapabilityVerifiesAndSaysWhatItGrants) {
  const absl::Time now = absl::Now();
  const std::string blob = Key().Mint(Scale(now + absl::Minutes(1)));
  absl::StatusOr<Capability> c = Key().Verify(blob, now);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->principal, "token:0a1b2c3d4e5f");
  EXPECT_EQ(c->handler, "scale");
  EXPECT_EQ(c->agent_id, "cpu-1");
  EXPECT_EQ(absl::ToUnixMillis(c->expires), absl::ToUnixMillis(now + absl::Minutes(1)));
  EXPECT_TRUE(CheckCapabilityScope(*c, "scale", "cpu-1").ok());
  absl::Status s = CheckCapabilityScope(*c, "axpy", "cpu-1");
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(s.message(), "the call's capability does not allow handler 'axpy'.");
  EXPECT_EQ(CheckCapabilityScope(*c, "scale", "cpu-2").code(), absl::StatusCode::kPermissionDenied);
}

TEST(CapabilityTest, ForgedExpiredAndOtherKeysAreRefused) {
  const absl::Time now = absl::Now();
  const std::string blob = Key().Mint(Scale(now + absl::Minutes(1)));
  // Another key's capability.
  absl::Status s = Key(std::string(32, 'z')).Verify(blob, now).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(s.message(),
            "the call's capability was not signed with this agent's key (--capability_key_file).");
  // Every single-bit change is caught: principal, handler, agent, expiry, MAC.
  for (size_t i = 0; i < blob.size(); ++i) {
    std::string forged = blob;
    forged[i] = static_cast<char>(forged[i] ^ 1);
    EXPECT_EQ(Key().Verify(forged, now).status().code(), absl::StatusCode::kUnauthenticated) << i;
  }
  // Truncated, extended, empty.
  EXPECT_FALSE(Key().Verify(blob.substr(0, blob.size() - 1), now).ok());
  EXPECT_FALSE(Key().Verify(blob + "x", now).ok());
  EXPECT_FALSE(Key().Verify("", now).ok());
  // Expired: after its time, even by a millisecond.
  s = Key().Verify(blob, now + absl::Minutes(2)).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(s.message(), HasSubstr("expired 1m ago"));
  // A minter cannot hand out more than five minutes.
  const std::string long_lived = Key().Mint(Scale(now + absl::Hours(24)));
  absl::StatusOr<Capability> c = Key().Verify(long_lived, now);
  ASSERT_TRUE(c.ok());
  EXPECT_LE(c->expires, absl::Now() + kMaxCapabilityLifetime);
  // Nothing secret in a message.
  EXPECT_THAT(s.message(), Not(HasSubstr(kSecret)));
}

TEST(CapabilityTest, KeysFailClosed) {
  EXPECT_EQ(CapabilityKey::Load("/nonexistent/key").status().code(), absl::StatusCode::kNotFound);
  const std::string path = ::testing::TempDir() + "capability-key";
  std::ofstream(path) << "  \n";
  absl::Status s = CapabilityKey::Load(path).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("holds 0 bytes; a key needs at least 32"));
  std::ofstream(path) << std::string(31, 'k') << "\n";
  EXPECT_FALSE(CapabilityKey::Load(path).ok());
  std::ofstream(path) << std::string(32, 'k') << "\n";
  EXPECT_TRUE(CapabilityKey::Load(path).ok());
  std::remove(path.c_str());
}

}  // namespace
// A field cut short would grant its prefix: a capability for a handler
// longer than kMaxCapabilityFieldBytes is not minted at all.
TEST(CapabilityTest, NoCapabilityIsMintedForANameLongerThanItHolds) {
  const absl::Time soon = absl::Now() + absl::Minutes(1);
  const std::string name(kMaxCapabilityFieldBytes, 'h');
  EXPECT_FALSE(Key().Mint({"token:aaaaaaaaaaaa", name, "cpu-1", soon}).empty());
  EXPECT_EQ(Key().Mint({"token:aaaaaaaaaaaa", name + "x", "cpu-1", soon}), "");
  EXPECT_EQ(Key().Mint({std::string(2000, 'p'), "copy", "cpu-1", soon}), "");
}

}  // namespace farcall
