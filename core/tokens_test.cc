#include "core/tokens.h"

#include <cctype>
#include <cstdio>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace farcall {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kFile[] = R"(# who may call what
alpha-token-0123456789 axpy,copy
   root-token-0123456789 *

)";

TEST(TokenTableTest, NoTableNeedsNoToken) {
  TokenTable t;
  EXPECT_FALSE(t.required());
  EXPECT_TRUE(t.Authorize("", "axpy").ok());
}

TEST(TokenTableTest, KnownTokensCallTheirHandlers) {
  absl::StatusOr<TokenTable> t = TokenTable::Parse(kFile, "tokens");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(t->required());
  EXPECT_TRUE(t->Authorize("Bearer alpha-token-0123456789", "axpy").ok());
  EXPECT_TRUE(t->Authorize("Bearer alpha-token-0123456789", "copy").ok());
  EXPECT_TRUE(t->Authorize("Bearer root-token-0123456789", "anything").ok());
  EXPECT_TRUE(t->Authenticate("Bearer alpha-token-0123456789").ok());
}

TEST(TokenTableTest, MissingUnknownAndUnauthorisedTokens) {
  absl::StatusOr<TokenTable> t = TokenTable::Parse(kFile, "tokens");
  ASSERT_TRUE(t.ok());
  absl::Status s = t->Authorize("", "axpy");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(s.message(), "this server needs a bearer token: send 'authorization: Bearer TOKEN'.");
  s = t->Authorize("Bearer alpha-token-0123456788", "axpy");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(s.message(), "the bearer token is not known to this server.");
  // A prefix or an extension of a token is not that token.
  EXPECT_EQ(t->Authorize("Bearer alpha-token-012345678", "axpy").code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(t->Authorize("Bearer alpha-token-01234567890", "axpy").code(),
            absl::StatusCode::kUnauthenticated);
  s = t->Authorize("Bearer alpha-token-0123456789", "sleep");
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(s.message(), "this token may not call handler 'sleep'.");
  EXPECT_THAT(s.message(), Not(HasSubstr("alpha")));
}

TEST(TokenTableTest, BadLinesNameTheLineNotTheToken) {
  absl::StatusOr<TokenTable> t =
      TokenTable::Parse("root-token-0123456789 *\nsecret-value\n", "/etc/tokens");
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(t.status().message(),
            "/etc/tokens line 2: expected 'TOKEN HANDLER[,HANDLER...]' or 'TOKEN *', then "
            "optional tenant=NAME, max_calls=N, max_bytes=N, ledger_bytes=N.");
  EXPECT_EQ(TokenTable::Load("/nonexistent/tokens").status().code(), absl::StatusCode::kNotFound);
}

TEST(TokenTableTest, AFileWithoutTokensIsRefusedNotOpen) {
  // Comments and blank lines alone would otherwise mean "no token needed".
  for (const char* text : {"", "# nobody yet\n", "\n   \n# x\n"}) {
    absl::StatusOr<TokenTable> t = TokenTable::Parse(text, "/etc/tokens");
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_THAT(t.status().message(), HasSubstr("the tokens file /etc/tokens holds no token"));
  }
}

// A path that is no tokens file (a device that never ends, a directory)
// is refused before it is read, never taken as an empty file.
TEST(TokenTableTest, WhatIsNoRegularFileIsRefused) {
  for (const std::string path : {"/dev/zero", "/tmp"}) {
    absl::StatusOr<TokenTable> t = TokenTable::Load(path);
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << path;
    EXPECT_THAT(t.status().message(), HasSubstr(path + " is not a regular file."));
  }
  EXPECT_EQ(TokenTable::Load("/nonexistent/tokens").status().code(), absl::StatusCode::kNotFound);
}

TEST(TokenTableTest, ShortAndRepeatedTokensAreRefusedByLine) {
  absl::StatusOr<TokenTable> t = TokenTable::Parse("# c\nshort-token-15b *\n", "tok");
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(t.status().message(),
            "tok line 2: the token is shorter than 16 bytes; use a long random one.");
  EXPECT_THAT(t.status().message(), Not(HasSubstr("short-token")));
  t = TokenTable::Parse("exactly-16-bytes *\nother-token-0123456 copy\nexactly-16-bytes copy\n",
                        "tok");
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(t.status().message(), "tok line 3: the token repeats the one on line 1.");
  t = TokenTable::Parse("exactly-16-bytes *\n", "tok");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->size(), 1u);
}

TEST(TokenTableTest, EachTokenIsAPrincipalNamedByItsDigest) {
  absl::StatusOr<TokenTable> t = TokenTable::Parse(kFile, "tokens");
  ASSERT_TRUE(t.ok());
  std::string alpha, root, none = "stale";
  ASSERT_TRUE(t->Authorize("Bearer alpha-token-0123456789", "copy", &alpha).ok());
  ASSERT_TRUE(t->Authorize("Bearer root-token-0123456789", "copy", &root).ok());
  // printf %s alpha-token-0123456789 | sha256sum | cut -c1-12
  EXPECT_EQ(alpha, PrincipalOfToken("alpha-token-0123456789"));
  EXPECT_EQ(PrincipalOfToken("abc"), "token:ba7816bf8f01");
  EXPECT_NE(alpha, root);
  EXPECT_THAT(alpha, Not(HasSubstr("alpha")));
  // A known token refused a handler still names its caller (for the audit
  // line); an unknown token names none; without tokens everyone is "".
  std::string refused = "stale";
  EXPECT_FALSE(t->Authorize("Bearer alpha-token-0123456789", "sleep", &refused).ok());
  EXPECT_EQ(refused, alpha);
  EXPECT_FALSE(t->Authorize("Bearer unknown-token-0123456789", "copy", &none).ok());
  EXPECT_EQ(none, "");
  none = "stale";
  EXPECT_TRUE(TokenTable().Authorize("", "copy", &none).ok());
  EXPECT_EQ(none, "");
}

// Two tokens of one team share its tenant: one principal, named by the
// tenant and never by a token, with the quotas its lines give.
TEST(TokenTableTest, TokensOfOneTenantShareItsNameAndQuotas) {
  absl::StatusOr<TokenTable> t = TokenTable::Parse(
      "team-a-token-one-0123 copy tenant=team-a max_calls=3 max_bytes=1048576 "
      "ledger_bytes=4096\n"
      "team-a-token-two-0123 * ledger_bytes=4096 max_bytes=1048576 tenant=team-a max_calls=3\n"
      "loner-token-012345678 copy\n",
      "tok");
  ASSERT_TRUE(t.ok()) << t.status();
  std::string one, two, loner;
  TenantQuota q1, q2, q3{7, 7};
  ASSERT_TRUE(t->Authorize("Bearer team-a-token-one-0123", "copy", &one, &q1).ok());
  ASSERT_TRUE(t->Authorize("Bearer team-a-token-two-0123", "axpy", &two, &q2).ok());
  ASSERT_TRUE(t->Authorize("Bearer loner-token-012345678", "copy", &loner, &q3).ok());
  EXPECT_EQ(one, "tenant:team-a");
  EXPECT_EQ(two, "tenant:team-a");
  EXPECT_EQ(loner, PrincipalOfToken("loner-token-012345678"));
  EXPECT_EQ(q1.max_calls, 3);
  EXPECT_EQ(q1.max_bytes, 1048576);
  EXPECT_EQ(q2.max_bytes, 1048576);
  EXPECT_EQ(q1.ledger_bytes, 4096);
  EXPECT_EQ(q3.max_calls, 0) << "an unnamed line's quotas are the flags'";
  EXPECT_EQ(q3.max_bytes, 0);
  EXPECT_EQ(t->principals(),
            (std::vector<std::string>{"tenant:team-a", PrincipalOfToken("loner-token-012345678")}));
}

TEST(TokenTableTest, BadTenantFieldsAreRefusedByLine) {
  const std::pair<const char*, const char*> cases[] = {
      {"some-token-0123456789 * tenant=",
       "tok line 1: a tenant name is 1 to 64 of [A-Za-z0-9._-]."},
      {"some-token-0123456789 * tenant=a/b",
       "tok line 1: a tenant name is 1 to 64 of [A-Za-z0-9._-]."},
      {"some-token-0123456789 * max_calls=0",
       "tok line 1: max_calls must be a positive whole "
       "number; got '0'."},
      {"some-token-0123456789 * max_bytes=-5",
       "tok line 1: max_bytes must be a positive whole "
       "number; got '-5'."},
      {"some-token-0123456789 * max_bytes=99999999999999999999",
       "tok line 1: max_bytes must be a positive whole number; got '99999999999999999999'."},
      {"some-token-0123456789 * weight=2",
       "tok line 1: unknown field 'weight' (after the handlers a line may give tenant=, "
       "max_calls=, max_bytes= and ledger_bytes=)."},
      {"some-token-0123456789 tenant=x",
       "tok line 1: expected 'TOKEN HANDLER[,HANDLER...]' or "
       "'TOKEN *', then optional tenant=NAME, max_calls=N, "
       "max_bytes=N, ledger_bytes=N."},
      {"some-token-0123456789 * tenant=t max_calls=2\nother-token-0123456789 copy tenant=t",
       "tok line 2: tenant t has other quotas on line 1; give them alike."},
  };
  for (const auto& [text, message] : cases) {
    absl::StatusOr<TokenTable> t = TokenTable::Parse(text, "tok");
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_EQ(t.status().message(), message);
    EXPECT_THAT(t.status().message(), Not(HasSubstr("token-0123456789")));
  }
  EXPECT_TRUE(TokenTable::Parse(
                  absl::StrCat("some-token-0123456789 * tenant=", std::string(64, 'x')), "tok")
                  .ok());
  EXPECT_FALSE(TokenTable::Parse(
                   absl::StrCat("some-token-0123456789 * tenant=", std::string(65, 'x')), "tok")
                   .ok());
}

// A server that holds only a token's digest lets that token in, as the
// same principal, and holds nothing a caller could present: the digest
// itself is no token.
TEST(TokenTableTest, ADigestLineLetsItsTokenInAndIsNoTokenItself) {
  // printf %s router-token-0123456789 | sha256sum
  const std::string hex = "9c8bcf1baa767b86f2f5c19a7db710abd1f73187f7a9204b2b1dcea9350274c9";
  const std::string real = "router-token-0123456789";
  absl::StatusOr<TokenTable> t =
      TokenTable::Parse("sha256:" + hex + " copy\nalpha-token-0123456789 *\n", "digests");
  ASSERT_TRUE(t.ok()) << t.status();
  std::string p;
  EXPECT_TRUE(t->Authorize("Bearer " + real, "copy", &p).ok());
  EXPECT_EQ(p, PrincipalOfToken(real));
  EXPECT_EQ(t->Authorize("Bearer " + real, "sum").code(), absl::StatusCode::kPermissionDenied);
  // Presenting the digest (what a compromised holder of the file has) fails.
  EXPECT_EQ(t->Authenticate("Bearer sha256:" + hex).code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(t->Authenticate("Bearer " + hex).code(), absl::StatusCode::kUnauthenticated);
  // A digest and its token on two lines are one token, listed twice.
  absl::StatusOr<TokenTable> twice =
      TokenTable::Parse(real + " *\nsha256:" + hex + " copy\n", "twice");
  EXPECT_EQ(twice.status().message(), "twice line 2: the token repeats the one on line 1.");
  // Upper-case hex is a digest too; anything else is refused by line.
  std::string upper = hex;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  EXPECT_TRUE(TokenTable::Parse("sha256:" + upper + " *\n", "upper").ok());
  for (const std::string& bad : {"sha256:" + hex.substr(1), "sha256:" + hex + "0",
                                 "sha256:" + std::string(63, '0') + "g", std::string("sha256:")}) {
    absl::Status s = TokenTable::Parse(bad + " *\n", "bad").status();
    EXPECT_EQ(s.message(),
              "bad line 1: a digest is 'sha256:' and 64 hex digits (printf %s TOKEN | sha256sum).")
        << bad;
  }
}

}  // namespace
}  // namespace farcall

namespace farcall {
namespace {

void Write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

TEST(TokenTableReloadTest, AChangedFileReplacesTheTokensAndABadOneKeepsThem) {
  const std::string path = ::testing::TempDir() + "/tokens_reload_test";
  const std::string a(20, 'a'), b(20, 'b');
  Write(path, a + " *\n");
  absl::StatusOr<TokenTable> t = TokenTable::Load(path);
  ASSERT_TRUE(t.ok()) << t.status();
  const TokenTable copy = *t;                         // copies share the tokens and their reloads
  EXPECT_EQ(t->Reload(false).value_or(true), false);  // unchanged
  Write(path, b + " copy\n" + a + " *\n");
  EXPECT_EQ(t->Reload(false).value_or(false), true);
  EXPECT_EQ(copy.size(), 2u);
  EXPECT_TRUE(copy.Authorize("Bearer " + b, "copy").ok());
  // A file that would leave the server open is refused, and not read again
  // until it changes (or is forced).
  Write(path, "# none\n");
  absl::StatusOr<bool> bad = t->Reload(false);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), ::testing::HasSubstr("holds no token"));
  EXPECT_EQ(t->Reload(false).value_or(true), false);
  EXPECT_FALSE(t->Reload(true).ok());
  EXPECT_EQ(copy.size(), 2u);
  EXPECT_TRUE(copy.Authenticate("Bearer " + a).ok());
  std::remove(path.c_str());
  EXPECT_EQ(t->Reload(true).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(t->Reload(false).value_or(true), false);  // not again every tick
  EXPECT_TRUE(copy.Authenticate("Bearer " + b).ok());
  // A table parsed from text has no file to reload.
  absl::StatusOr<TokenTable> text = TokenTable::Parse(a + " *\n", "text");
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(text->Reload(true).status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace farcall
