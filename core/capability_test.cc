#include "core/capability.h"

#include <cstdio>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "openssl/evp.h"
#include "openssl/pem.h"

namespace farcall {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

// One router key for the whole file (keygen is the slow part).
const CapabilitySigner& Router() {
  static const auto* s =
      new CapabilitySigner(CapabilitySigner::FromPem(NewCapabilitySigningKeyPem(), "test").value());
  return *s;
}

CapabilityVerifier Trusting(const std::string& pem) {
  return CapabilityVerifier::FromPem(pem, "test").value();
}

Capability Scale(absl::Time expires) { return {"token:0a1b2c3d4e5f", "scale", "cpu-1", expires}; }

// A new private key of `type` as PEM; with a passphrase, encrypted (PKCS#8).
std::string KeyPem(const char* type, const char* param, const char* passphrase = nullptr) {
  EVP_PKEY* k = param != nullptr ? EVP_PKEY_Q_keygen(nullptr, nullptr, type, param)
                                 : EVP_PKEY_Q_keygen(nullptr, nullptr, type);
  BIO* bio = BIO_new(BIO_s_mem());
  if (passphrase != nullptr) {
    PEM_write_bio_PKCS8PrivateKey(bio, k, EVP_aes_256_cbc(), nullptr, 0, nullptr,
                                  const_cast<char*>(passphrase));
  } else {
    PEM_write_bio_PrivateKey(bio, k, nullptr, nullptr, 0, nullptr, nullptr);
  }
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio, &data);
  std::string pem(data, static_cast<size_t>(n));
  BIO_free(bio);
  EVP_PKEY_free(k);
  return pem;
}

// What a Reload did, in a word.
std::string Outcome(const absl::StatusOr<bool>& r) {
  return !r.ok() ? r.status().ToString() : *r ? "reloaded" : "unchanged";
}

// Under a name of this process's own (concurrent runs share TempDir()).
std::string WriteFile(const std::string& name, const std::string& text) {
  const std::string path = absl::StrCat(::testing::TempDir(), getpid(), "-", name);
  std::ofstream(path) << text;
  return path;
}

TEST(CapabilityTest, AMintedCapabilityVerifiesAndSaysWhatItGrants) {
  const absl::Time now = absl::Now();
  const std::string blob = Router().Mint(Scale(now + absl::Minutes(1)));
  absl::StatusOr<Capability> c = Trusting(Router().public_key_pem()).Verify(blob, now);
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

// The flaw the shared secret had: whoever could verify could mint. A
// verifier holds only public keys, and nothing it can make verifies.
TEST(CapabilityTest, WhatAnAgentHoldsCannotMint) {
  const std::string pub = Router().public_key_pem();
  // An agent's key file is refused as a signing key...
  absl::Status s = CapabilitySigner::FromPem(pub, "agent.pem").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("agent.pem: holds a public key only"));
  // ...and a key it makes up itself is not trusted.
  CapabilitySigner rogue = CapabilitySigner::FromPem(NewCapabilitySigningKeyPem(), "rogue").value();
  VerifyNote note;
  s = Trusting(pub)
          .Verify(rogue.Mint(Scale(absl::Now() + absl::Minutes(1))), absl::Now(), &note)
          .status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(s.message(),
              HasSubstr(absl::StrCat("was signed by a key this agent does not trust (key id ",
                                     rogue.key_id(), ")")));
  EXPECT_EQ(note.refusal, CapabilityRefusal::kUnknownKey);
  // Nor is one that claims the router's key id: the signature decides.
  std::string forged = Router().Mint(Scale(absl::Now() + absl::Minutes(1)));
  const std::string rogue_blob = rogue.Mint(Scale(absl::Now() + absl::Minutes(1)));
  forged.replace(forged.size() - 64, 64, rogue_blob.substr(rogue_blob.size() - 64));
  s = Trusting(pub).Verify(forged, absl::Now(), &note).status();
  EXPECT_EQ(s.message(),
            "the call's capability does not match its signature: it was altered or "
            "forged.");
  EXPECT_EQ(note.refusal, CapabilityRefusal::kBadSignature);
}

TEST(CapabilityTest, ForgedExpiredAndMalformedAreRefused) {
  const absl::Time now = absl::Now();
  const CapabilityVerifier v = Trusting(Router().public_key_pem());
  const std::string blob = Router().Mint(Scale(now + absl::Minutes(1)));
  // Every single-bit change is caught: version, key id, fields, expiry,
  // signature.
  for (size_t i = 0; i < blob.size(); ++i) {
    std::string forged = blob;
    forged[i] = static_cast<char>(forged[i] ^ 1);
    EXPECT_EQ(v.Verify(forged, now).status().code(), absl::StatusCode::kUnauthenticated) << i;
  }
  // Truncated, extended, empty.
  EXPECT_FALSE(v.Verify(blob.substr(0, blob.size() - 1), now).ok());
  EXPECT_FALSE(v.Verify(blob + "x", now).ok());
  EXPECT_FALSE(v.Verify("", now).ok());
  // Expired: after its time, even by a millisecond; and from the cache too.
  ASSERT_TRUE(v.Verify(blob, now).ok());
  VerifyNote note;
  absl::Status s = v.Verify(blob, now + absl::Minutes(2), &note).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(s.message(), HasSubstr("expired 1m ago"));
  EXPECT_EQ(note.refusal, CapabilityRefusal::kExpired);
  // A minter cannot hand out more than five minutes.
  const std::string long_lived = Router().Mint(Scale(now + absl::Hours(24)));
  absl::StatusOr<Capability> c = v.Verify(long_lived, now);
  ASSERT_TRUE(c.ok());
  EXPECT_LE(c->expires, absl::Now() + kMaxCapabilityLifetime);
  // One that claims more (a minter with a clock far ahead) is refused.
  note = {};
  s = v.Verify(long_lived, now - absl::Minutes(10), &note).status();
  EXPECT_THAT(s.message(), HasSubstr("claims to last past the 5m"));
  EXPECT_EQ(note.refusal, CapabilityRefusal::kTooLong);
}

TEST(CapabilityTest, AVerifiedCapabilityIsCheckedOnceThenRemembered) {
  const absl::Time now = absl::Now();
  const CapabilityVerifier v = Trusting(Router().public_key_pem());
  const std::string blob = Router().Mint(Scale(now + absl::Minutes(1)));
  VerifyNote first, second;
  ASSERT_TRUE(v.Verify(blob, now, &first).ok());
  ASSERT_TRUE(v.Verify(blob, now, &second).ok());
  EXPECT_FALSE(first.cached);
  EXPECT_TRUE(second.cached);
  // A refused one is never remembered.
  std::string forged = blob;
  forged[20] ^= 1;
  EXPECT_FALSE(v.Verify(forged, now).ok());
  VerifyNote again;
  EXPECT_FALSE(v.Verify(forged, now, &again).ok());
  EXPECT_FALSE(again.cached);
  // Bounded: past kCapabilityCacheEntries the oldest goes (and is checked
  // again, successfully).
  for (size_t i = 0; i < kCapabilityCacheEntries; ++i) {
    ASSERT_TRUE(v.Verify(Router().Mint(
                             {absl::StrCat("token:", i), "scale", "cpu-1", now + absl::Minutes(1)}),
                         now)
                    .ok());
  }
  VerifyNote evicted;
  ASSERT_TRUE(v.Verify(blob, now, &evicted).ok());
  EXPECT_FALSE(evicted.cached);
}

TEST(CapabilityTest, TheSignerHandsOutOneCapabilityForAWhile) {
  const std::string a = Router().MintFor("token:aaaaaaaaaaaa", "scale", "cpu-1");
  EXPECT_EQ(Router().MintFor("token:aaaaaaaaaaaa", "scale", "cpu-1"), a);
  EXPECT_NE(Router().MintFor("token:aaaaaaaaaaaa", "scale", "cpu-2"), a);
  EXPECT_NE(Router().MintFor("token:aaaaaaaaaaaa", "copy", "cpu-1"), a);
  // No two triples share an entry however their names split.
  EXPECT_NE(Router().MintFor("ab", "c", "cpu-1"), Router().MintFor("a", "bc", "cpu-1"));
  absl::StatusOr<Capability> c = Trusting(Router().public_key_pem()).Verify(a, absl::Now());
  ASSERT_TRUE(c.ok());
  EXPECT_GT(c->expires, absl::Now() + kMaxCapabilityLifetime - kCapabilityReuse);
}

// Rotation: an agent trusts old and new keys while the router switches, and
// a key taken out stops working at once, cached or not.
TEST(CapabilityTest, RotationTrustsBothKeysThenDropsTheOld) {
  const std::string old_pem = NewCapabilitySigningKeyPem();
  const std::string new_pem = NewCapabilitySigningKeyPem();
  const std::string router_path = WriteFile("router.pem", old_pem);
  CapabilitySigner router = CapabilitySigner::Load(router_path).value();
  const std::string old_pub = router.public_key_pem();
  const std::string new_pub = CapabilitySigner::FromPem(new_pem, "new").value().public_key_pem();
  const std::string agent_path = WriteFile("trusted.pem", old_pub);
  CapabilityVerifier agent = CapabilityVerifier::Load(agent_path).value();
  const std::string old_blob = router.MintFor("token:aaaaaaaaaaaa", "scale", "cpu-1");
  ASSERT_TRUE(agent.Verify(old_blob, absl::Now()).ok());

  // 1. The agents trust both.
  WriteFile("trusted.pem", old_pub + new_pub);
  ASSERT_EQ(Outcome(agent.Reload(false)), "reloaded");
  EXPECT_EQ(agent.key_ids().size(), 2u);
  // Nothing changed: nothing to do.
  EXPECT_EQ(Outcome(agent.Reload(false)), "unchanged");
  // 2. The router signs with the new key; what it hands out is new at once.
  const std::string old_id = router.key_id();
  WriteFile("router.pem", new_pem);
  ASSERT_EQ(Outcome(router.Reload(false)), "reloaded");
  EXPECT_NE(router.key_id(), old_id);
  const std::string new_blob = router.MintFor("token:aaaaaaaaaaaa", "scale", "cpu-1");
  EXPECT_NE(new_blob, old_blob);
  EXPECT_TRUE(agent.Verify(new_blob, absl::Now()).ok());
  EXPECT_TRUE(agent.Verify(old_blob, absl::Now()).ok());
  // 3. The old key goes: its capabilities stop working, though verified
  // before.
  WriteFile("trusted.pem", new_pub);
  ASSERT_EQ(Outcome(agent.Reload(false)), "reloaded");
  EXPECT_EQ(agent.Verify(old_blob, absl::Now()).status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE(agent.Verify(new_blob, absl::Now()).ok());

  // A bad file keeps the keys in use, and is not tried again until it
  // changes (or force).
  WriteFile("trusted.pem", "garbage");
  EXPECT_FALSE(agent.Reload(false).ok());
  EXPECT_EQ(Outcome(agent.Reload(false)), "unchanged");
  EXPECT_FALSE(agent.Reload(true).ok());
  EXPECT_TRUE(agent.Verify(new_blob, absl::Now()).ok());
  WriteFile("router.pem", new_pub);  // the public half: refused
  EXPECT_FALSE(router.Reload(false).ok());
  EXPECT_TRUE(agent.Verify(router.Mint(Scale(absl::Now() + absl::Minutes(1))), absl::Now()).ok());
  std::remove(router_path.c_str());
  std::remove(agent_path.c_str());
}

TEST(CapabilityTest, KeyFilesFailClosed) {
  EXPECT_EQ(CapabilitySigner::Load("/nonexistent/key").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(CapabilityVerifier::Load("/nonexistent/key").status().code(),
            absl::StatusCode::kNotFound);
  const std::string priv = NewCapabilitySigningKeyPem();
  const std::string pub = Router().public_key_pem();
  struct Case {
    std::string text;
    bool signer;
    std::string says;
  } cases[] = {
      {"", true, "holds no PEM private key"},
      {"  \n", false, "holds no PEM public key"},
      {pub, true, "holds a public key only"},
      {priv, false, "holds a private key; an agent must hold public keys only"},
      {pub + priv, false, "holds a private key"},
      {pub + "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n", false,
       "one of its PEM blocks is not a public key"},
      {"-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIA==\n-----END PRIVATE KEY-----\n", true,
       "does not parse"},
      // A P-256 key (what `openssl ecparam -genkey` makes) is not Ed25519.
      {KeyPem("EC", "P-256"), true, "holds a key of type EC; capabilities are signed with Ed25519"},
      // Encrypted: nothing prompts for a passphrase (at start or on SIGHUP).
      {KeyPem("ED25519", nullptr, "secret-passphrase"), true,
       "holds a private key encrypted with a passphrase"},
  };
  for (const Case& c : cases) {
    const std::string path = WriteFile("key.pem", c.text);
    absl::Status s =
        c.signer ? CapabilitySigner::Load(path).status() : CapabilityVerifier::Load(path).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.says;
    EXPECT_THAT(s.message(), HasSubstr(c.says));
    EXPECT_THAT(std::string(s.message()), StartsWith(path));
    EXPECT_THAT(s.message(), Not(HasSubstr("MC4C")));
    std::remove(path.c_str());
  }
  // What is not a key file at all is refused before it is read whole: a
  // device that never ends, a directory, a file past 1 MiB.
  const std::string big = WriteFile("big.pem", std::string((1 << 20) + 1, 'k'));
  for (const std::string& path : {std::string("/dev/zero"), ::testing::TempDir(), big}) {
    for (bool signer : {true, false}) {
      absl::Status s =
          signer ? CapabilitySigner::Load(path).status() : CapabilityVerifier::Load(path).status();
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << path << s;
      EXPECT_THAT(s.message(),
                  ::testing::AnyOf(HasSubstr(path + " is not a regular file."),
                                   HasSubstr(path + " is larger than 1048576 bytes.")));
    }
  }
  std::remove(big.c_str());
}

// A field cut short would grant its prefix: a capability for a handler
// longer than kMaxCapabilityFieldBytes is not minted at all.
TEST(CapabilityTest, NoCapabilityIsMintedForANameLongerThanItHolds) {
  const absl::Time soon = absl::Now() + absl::Minutes(1);
  const std::string name(kMaxCapabilityFieldBytes, 'h');
  const std::string longest = Router().Mint({"token:aaaaaaaaaaaa", name, "cpu-1", soon});
  EXPECT_FALSE(longest.empty());
  EXPECT_TRUE(Trusting(Router().public_key_pem()).Verify(longest, absl::Now()).ok());
  EXPECT_EQ(Router().Mint({"token:aaaaaaaaaaaa", name + "x", "cpu-1", soon}), "");
  EXPECT_EQ(Router().Mint({std::string(2000, 'p'), "copy", "cpu-1", soon}), "");
  // Every field at its longest still fits what a verifier reads.
  const std::string f(kMaxCapabilityFieldBytes, 'f');
  const std::string all = Router().Mint({f, f, f, soon});
  EXPECT_LE(all.size(), kMaxCapabilityBytes);
  EXPECT_TRUE(Trusting(Router().public_key_pem()).Verify(all, absl::Now()).ok());
}

}  // namespace
}  // namespace farcall
