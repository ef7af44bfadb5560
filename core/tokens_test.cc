#include "core/tokens.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace farcall {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kFile[] = R"(# who may call what
alpha-token axpy,copy
   root-token *

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
  EXPECT_TRUE(t->Authorize("Bearer alpha-token", "axpy").ok());
  EXPECT_TRUE(t->Authorize("Bearer alpha-token", "copy").ok());
  EXPECT_TRUE(t->Authorize("Bearer root-token", "anything").ok());
  EXPECT_TRUE(t->Authenticate("Bearer alpha-token").ok());
}

TEST(TokenTableTest, MissingUnknownAndUnauthorisedTokens) {
  absl::StatusOr<TokenTable> t = TokenTable::Parse(kFile, "tokens");
  ASSERT_TRUE(t.ok());
  absl::Status s = t->Authorize("", "axpy");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(s.message(), "this server needs a bearer token: send 'authorization: Bearer TOKEN'.");
  s = t->Authorize("Bearer alpha-tokem", "axpy");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(s.message(), "the bearer token is not known to this server.");
  // A prefix or an extension of a token is not that token.
  EXPECT_EQ(t->Authorize("Bearer alpha-toke", "axpy").code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(t->Authorize("Bearer alpha-token2", "axpy").code(), absl::StatusCode::kUnauthenticated);
  s = t->Authorize("Bearer alpha-token", "sleep");
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(s.message(), "this token may not call handler 'sleep'.");
  EXPECT_THAT(s.message(), Not(HasSubstr("alpha")));
}

TEST(TokenTableTest, BadLinesNameTheLineNotTheToken) {
  absl::StatusOr<TokenTable> t = TokenTable::Parse("ok *\nsecret-value\n", "/etc/tokens");
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(t.status().message(),
            "/etc/tokens line 2: expected 'TOKEN HANDLER[,HANDLER...]' or 'TOKEN *'.");
  EXPECT_EQ(TokenTable::Load("/nonexistent/tokens").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace farcall
