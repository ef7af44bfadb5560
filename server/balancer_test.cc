#include "server/balancer.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace farcall::router {
namespace {

std::vector<std::shared_ptr<AgentHandle>> Agents(int n) {
  std::vector<std::shared_ptr<AgentHandle>> out;
  for (int i = 0; i < n; ++i) {
    auto a = std::make_shared<AgentHandle>();
    a->address = absl::StrCat("10.0.0.", i, ":50051");
    out.push_back(a);
  }
  return out;
}

TEST(PickAgentTest, OfTwoTheLessBusyAlwaysWins) {
  auto agents = Agents(2);
  agents[0]->inflight = 5;
  for (int i = 0; i < 100; ++i) EXPECT_EQ(PickAgent(agents), agents[1]);
  agents[1]->inflight = 9;
  for (int i = 0; i < 100; ++i) EXPECT_EQ(PickAgent(agents), agents[0]);
}

TEST(PickAgentTest, TheBusiestOfManyIsNeverPickedAndTheRestShareTheLoad) {
  auto agents = Agents(4);
  agents[3]->inflight = 100;  // two choices: it always loses to the other one
  std::map<AgentHandle*, int> picked;
  for (int i = 0; i < 4000; ++i) ++picked[PickAgent(agents).get()];
  EXPECT_EQ(picked.count(agents[3].get()), 0u);
  for (int i = 0; i < 3; ++i) EXPECT_GT(picked[agents[i].get()], 600) << i;
  EXPECT_EQ(PickAgent(Agents(1))->address, "10.0.0.0:50051");  // one: that one
}

TEST(PickAgentForTest, AKeyStaysWithItsAgentAndOnlyAGoneAgentsKeysMove) {
  auto agents = Agents(5);
  std::map<std::string, std::string> first;
  for (int k = 0; k < 500; ++k) {
    const std::string key = absl::StrCat("call-", k);
    first[key] = PickAgentFor(key, agents)->address;
    EXPECT_EQ(PickAgentFor(key, agents)->address, first[key]);  // the same again
    // Not the load: a busy agent keeps its keys.
    agents[k % 5]->inflight = k;
  }
  // The candidates in another order: the same answers.
  std::vector<std::shared_ptr<AgentHandle>> reversed(agents.rbegin(), agents.rend());
  for (const auto& [key, address] : first) EXPECT_EQ(PickAgentFor(key, reversed)->address, address);
  // One agent goes: only its keys move, and they spread over the others.
  const std::string gone = agents[2]->address;
  std::vector<std::shared_ptr<AgentHandle>> rest = agents;
  rest.erase(rest.begin() + 2);
  int moved = 0;
  for (const auto& [key, address] : first) {
    const std::string now = PickAgentFor(key, rest)->address;
    if (address == gone) {
      ++moved;
      EXPECT_NE(now, gone);
    } else {
      EXPECT_EQ(now, address) << key;
    }
  }
  EXPECT_GT(moved, 50);  // about a fifth of 500
  EXPECT_LT(moved, 150);
}

}  // namespace
}  // namespace farcall::router
