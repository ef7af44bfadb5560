#include "device_agents/admission.h"

#include <atomic>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "device_agents/worker_pool.h"

#include "gtest/gtest.h"

namespace farcall::agent {
namespace {

TEST(AdmissionTest, AdmitsWhatFitsAndQueuesTheRest) {
  Admission a(100);
  EXPECT_TRUE(a.TryAcquire(60));
  EXPECT_FALSE(a.TryAcquire(50));
  std::vector<int> order;
  a.Wait(50, [&] { order.push_back(1); });
  a.Wait(10, [&] { order.push_back(2); });  // fits, but must not overtake
  EXPECT_TRUE(order.empty());
  EXPECT_EQ(a.waiting(), 2u);
  EXPECT_FALSE(a.TryAcquire(1));  // nobody overtakes the queue
  a.Release(60);
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
  EXPECT_EQ(a.held(), 60);
  a.Release(50);
  a.Release(10);
  EXPECT_EQ(a.held(), 0);
}

TEST(AdmissionTest, CancelledWaiterNeverResumesAndUnblocksOthers) {
  Admission a(100);
  ASSERT_TRUE(a.TryAcquire(90));
  bool big = false, small = false;
  uint64_t t = a.Wait(80, [&] { big = true; });
  a.Wait(5, [&] { small = true; });
  EXPECT_TRUE(a.Cancel(t));
  EXPECT_FALSE(big);
  EXPECT_TRUE(small);  // it fit all along; only the head held it back
  EXPECT_FALSE(a.Cancel(t));
  EXPECT_EQ(a.held(), 95);
}

TEST(AdmissionTest, WaitAdmitsAtOnceWhenBytesCameFree) {
  Admission a(10);
  bool resumed = false;
  uint64_t t = a.Wait(10, [&] { resumed = true; });
  EXPECT_TRUE(resumed);
  EXPECT_FALSE(a.Cancel(t));
  EXPECT_EQ(a.held(), 10);
}

// Tenant A queued many calls before tenant B's one: B's goes after at most
// one more of A's, not after all of them.
TEST(AdmissionTest, TenantsAreServedInTurnNotInArrivalOrder) {
  Admission a(100);
  const Admission::Tenant ta{"A"}, tb{"B"};
  ASSERT_TRUE(a.TryAcquire(100, ta));
  std::vector<std::string> order;
  for (int i = 0; i < 4; ++i)
    a.Wait(
        50, [&] { order.push_back("A"); }, ta);
  a.Wait(
      50, [&] { order.push_back("B"); }, tb);
  EXPECT_EQ(a.waiting(), 5u);
  a.Release(100, "A");
  EXPECT_EQ(order, (std::vector<std::string>{"B", "A"}));
  a.Release(50, "B");
  a.Release(50, "A");
  EXPECT_EQ(order, (std::vector<std::string>{"B", "A", "A", "A"}));
  a.Release(50, "A");
  a.Release(50, "A");
  a.Release(50, "A");
  EXPECT_EQ(a.held(), 0);
  EXPECT_EQ(a.waiting(), 0u);
}

// Fairness is by bytes: a tenant of small calls gets as many bytes through
// as one of large calls while both wait.
TEST(AdmissionTest, TurnsAreWeighedInBytes) {
  Admission a(64);
  const Admission::Tenant big{"big"}, small{"small"};
  ASSERT_TRUE(a.TryAcquire(64, big));
  int64_t big_bytes = 64, small_bytes = 0;  // what big held first counts too
  std::vector<std::pair<std::string, int64_t>> admitted;
  for (int i = 0; i < 8; ++i) {
    a.Wait(
        32,
        [&] {
          admitted.push_back({"big", 32});
        },
        big);
  }
  for (int i = 0; i < 64; ++i) {
    a.Wait(
        4,
        [&] {
          admitted.push_back({"small", 4});
        },
        small);
  }
  a.Release(64, "big");
  // Release each admitted call in turn until 320 bytes went through.
  for (size_t i = 0; i < admitted.size() && big_bytes + small_bytes < 320; ++i) {
    (admitted[i].first == "big" ? big_bytes : small_bytes) += admitted[i].second;
    a.Release(admitted[i].second, admitted[i].first);
  }
  EXPECT_NEAR(static_cast<double>(small_bytes) / static_cast<double>(big_bytes), 1.0, 0.3)
      << "big " << big_bytes << ", small " << small_bytes;
}

// A tenant at its quota waits in its own queue; the others go past it.
TEST(AdmissionTest, ATenantAtItsQuotaWaitsAndTheOthersGoOn) {
  Admission a(100);
  const Admission::Tenant capped{"C", 30};
  EXPECT_TRUE(a.TryAcquire(20, capped));
  EXPECT_FALSE(a.TryAcquire(20, capped));
  bool c_went = false;
  a.Wait(
      20, [&] { c_went = true; }, capped);
  EXPECT_FALSE(c_went);
  EXPECT_EQ(a.waiting(), 1u);
  EXPECT_EQ(a.waiting_for_budget(), 0u) << "a call over its own quota contends for no budget";
  EXPECT_TRUE(a.TryAcquire(60, {"B"}));  // not held up by C's waiting call
  EXPECT_EQ(a.held("C"), 20);
  a.Release(20, "C");
  EXPECT_TRUE(c_went);
  EXPECT_EQ(a.held("C"), 20);
  EXPECT_EQ(a.held(), 80);
}

// Slow drip across tenants: A's callers hold the budget and queue more of
// theirs; B's small call, queued last, goes first when bytes come free.
TEST(AdmissionTest, ASmallCallIsNotQueuedBehindAnotherTenantsWaitingCalls) {
  Admission a(1000);
  const Admission::Tenant ta{"A"};
  ASSERT_TRUE(a.TryAcquire(500, ta));
  ASSERT_TRUE(a.TryAcquire(500, ta));
  std::vector<std::string> order;
  a.Wait(
      500, [&] { order.push_back("A"); }, ta);
  a.Wait(
      500, [&] { order.push_back("A"); }, ta);
  a.Wait(8, [&] { order.push_back("B"); }, {"B"});
  a.Release(500, "A");  // one of A's holders ended
  ASSERT_FALSE(order.empty());
  EXPECT_EQ(order.front(), "B");
}

TEST(AdmissionTest, ATenantThatLeftKeepsNoCreditAndIsForgotten) {
  Admission a(10);
  // A ran alone for a long time: its tags ran far ahead of the clock.
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(a.TryAcquire(10, {"A"}));
    a.Release(10, "A");
  }
  ASSERT_TRUE(a.TryAcquire(10, {"A"}));
  std::vector<std::string> order;
  a.Wait(10, [&] { order.push_back("A"); }, {"A"});
  a.Wait(10, [&] { order.push_back("B"); }, {"B"});
  a.Release(10, "A");
  EXPECT_EQ(order, (std::vector<std::string>{"B"}));
  a.Release(10, "B");
  EXPECT_EQ(order, (std::vector<std::string>{"B", "A"}));
  a.Release(10, "A");
  EXPECT_EQ(a.held("A"), 0);
  EXPECT_EQ(a.held(), 0);
}

}  // namespace
}  // namespace farcall::agent

namespace farcall::agent {
namespace {

void Inline(std::function<void()> f) { f(); }

TEST(BudgetWaitTest, AWithdrawalBeforeTheWaitIsQueuedStillTakesItOut) {
  Admission a(100);
  ASSERT_TRUE(a.TryAcquire(100));  // full: the next call must wait
  BudgetWait w;
  // The call is cancelled before its wait exists (OnCancel racing the
  // admission): the wait must not stay queued, and the call must end.
  w.Withdraw(a);
  int go = 0, withdrawn = 0;
  w.Admit(
      a, 10, {}, [&] { ++go; }, [&] { ++withdrawn; }, Inline);
  EXPECT_EQ(withdrawn, 1);
  EXPECT_EQ(a.waiting(), 0u);
  a.Release(100);
  EXPECT_EQ(go, 0);
  EXPECT_EQ(a.held(), 0);
}

TEST(BudgetWaitTest, ExactlyOneOfAdmittedAndWithdrawnRuns) {
  Admission a(100);
  ASSERT_TRUE(a.TryAcquire(100));
  BudgetWait admitted, withdrawn;
  int go = 0, gone = 0;
  admitted.Admit(
      a, 10, {}, [&] { ++go; }, [&] { ++gone; }, Inline);
  withdrawn.Admit(
      a, 10, {}, [&] { ++go; }, [&] { ++gone; }, Inline);
  withdrawn.Withdraw(a);
  withdrawn.Withdraw(a);  // twice: still once
  EXPECT_EQ(gone, 1);
  a.Release(100);
  EXPECT_EQ(go, 1);
  admitted.Withdraw(a);  // after admission: nothing
  EXPECT_EQ(gone, 1);
  EXPECT_EQ(a.held(), 10);
}

TEST(BudgetWaitTest, ACallAdmittedAtOnceIgnoresAWithdrawal) {
  Admission a(100);
  BudgetWait w;
  int go = 0, gone = 0;
  w.Admit(
      a, 10, {}, [&] { ++go; }, [&] { ++gone; }, Inline);
  w.Withdraw(a);
  EXPECT_EQ(go, 1);
  EXPECT_EQ(gone, 0);
}

// Many calls of three tenants at once: each waits for its bytes, is admitted on the pool (as
// the agent resumes calls) and gives them back, or is withdrawn by another
// thread at any moment. Every call ends exactly once, and no byte is lost.
TEST(BudgetWaitTest, ManyCallsAdmittedAndWithdrawnAtOnceLoseNoByte) {
  constexpr int kThreads = 6, kCalls = 400;
  Admission a(100);
  std::vector<std::atomic<int>> ended(kThreads * kCalls);  // 1: ran, 2: withdrawn
  std::atomic<int> finished{0};
  absl::Notification all_ended;
  auto end_one = [&] {
    if (++finished == kThreads * kCalls) all_ended.Notify();
  };
  {
    WorkerPool pool(3);
    auto on_pool = [&](std::function<void()> f) { pool.Submit(std::move(f)); };
    std::vector<std::thread> callers;
    for (int t = 0; t < kThreads; ++t) {
      callers.emplace_back([&, t] {
        std::mt19937 rng(t);
        for (int i = 0; i < kCalls; ++i) {
          const int k = t * kCalls + i;
          const int64_t bytes = 1 + static_cast<int64_t>(rng() % 60);
          auto w = std::make_shared<BudgetWait>();
          // Three tenants, one with a quota of its own.
          const Admission::Tenant tenant{absl::StrCat("t", k % 3), k % 3 == 0 ? 70 : 0};
          w->Admit(
              a, bytes, tenant,
              [&, k, bytes, name = tenant.name] {
                ended[k] += 1;
                a.Release(bytes, name);
                end_one();
              },
              [&, k] {
                ended[k] += 2;
                end_one();
              },
              on_pool);
          // A third of the calls are cancelled, from another thread.
          if (rng() % 3 == 0) pool.Submit([&a, w] { w->Withdraw(a); });
        }
      });
    }
    for (auto& c : callers) c.join();
    ASSERT_TRUE(all_ended.WaitForNotificationWithTimeout(absl::Seconds(60)))
        << finished.load() << " of " << kThreads * kCalls << " calls ended";
  }
  for (size_t k = 0; k < ended.size(); ++k) {
    ASSERT_TRUE(ended[k] == 1 || ended[k] == 2)
        << "call " << k << " ended " << ended[k] << " times";
  }
  EXPECT_EQ(a.held(), 0);
  EXPECT_EQ(a.waiting(), 0u);
}

}  // namespace
}  // namespace farcall::agent
