#include "core/tenant_labels.h"

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace farcall {
namespace {

TEST(TenantLabelsTest, TokensFileTenantsComeFirstThenCallersUntilTheCap) {
  TenantLabels labels(3);
  labels.Seed({"tenant:team-a", "token:0123456789ab"});
  EXPECT_EQ(labels.Of(""), "-");
  EXPECT_EQ(labels.Of("tenant:team-a"), "tenant:team-a");
  EXPECT_EQ(labels.Of("tenant:via-router"), "tenant:via-router");
  EXPECT_EQ(labels.Of("tenant:late"), "other");
  EXPECT_EQ(labels.Of("token:0123456789ab"), "token:0123456789ab");
  EXPECT_EQ(labels.Of("tenant:via-router"), "tenant:via-router");
  EXPECT_EQ(labels.size(), 3u);
}

// An adversary that makes up a new principal for every call never grows
// the label set past the cap.
TEST(TenantLabelsTest, AFloodOfNewPrincipalsStaysWithinTheCap) {
  TenantLabels labels(8);
  absl::flat_hash_set<std::string> values;
  for (int i = 0; i < 100000; ++i) values.insert(labels.Of(absl::StrCat("token:", i)));
  values.insert(labels.Of(""));
  EXPECT_EQ(labels.size(), 8u);
  EXPECT_EQ(values.size(), 8u + 2u);  // eight tenants, "other" and "-"
  EXPECT_TRUE(values.contains("other"));
}

}  // namespace
}  // namespace farcall
