#include "core/rendezvous.h"

#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace farcall {
namespace {

// Routers and clients in other processes, and of other builds, must agree:
// the scores are fixed numbers, not a per-process hash.
TEST(RendezvousTest, ScoresAreTheSameInEveryProcess) {
  EXPECT_EQ(RendezvousScore("call-1", "10.0.0.1:50051"), 17648191218693839900u);
  EXPECT_EQ(RendezvousScore("call-1", "10.0.0.2:50051"), 12552459827216819844u);
}

TEST(RendezvousTest, KeyAndAddressDoNotRunTogether) {
  EXPECT_NE(RendezvousScore("ab", "c"), RendezvousScore("a", "bc"));
}

TEST(RendezvousTest, KeysSpreadEvenlyOverAgents) {
  const std::string agents[] = {"10.0.0.1:50051", "10.0.0.2:50051", "10.0.0.3:50051",
                                "10.0.0.4:50051"};
  std::map<std::string, int> wins;
  for (int k = 0; k < 4000; ++k) {
    const std::string key = absl::StrCat("call-", k);
    const std::string* best = nullptr;
    uint64_t best_score = 0;
    for (const std::string& a : agents) {
      const uint64_t s = RendezvousScore(key, a);
      if (best == nullptr || s > best_score) {
        best = &a;
        best_score = s;
      }
    }
    ++wins[*best];
  }
  for (const std::string& a : agents) {
    EXPECT_GT(wins[a], 850) << a;  // 1000 each on average
    EXPECT_LT(wins[a], 1150) << a;
  }
}

}  // namespace
}  // namespace farcall
