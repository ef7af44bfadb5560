#include "core/ucx/ucx_worker.h"

#include <algorithm>
#include <cstdlib>
#include <numeric>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace farcall::ucx {
namespace {

std::unique_ptr<Worker> Make(const std::string& transports = "") {
  Worker::Options o;
  o.transports = transports;
  auto w = Worker::Create(o);
  EXPECT_TRUE(w.ok()) << w.status();
  return w.ok() ? *std::move(w) : nullptr;
}

std::vector<uint8_t> Pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 131 + seed + (i >> 12));
  return v;
}

absl::Time Soon() { return absl::Now() + absl::Seconds(30); }

// Each transport UCX picks by itself on one host, and TCP as between hosts.
class UcxWorkerTest : public ::testing::TestWithParam<std::string> {};

TEST_P(UcxWorkerTest, BytesArriveExactlyInThePostedBuffer) {
  auto a = Make(GetParam()), b = Make(GetParam());
  ASSERT_TRUE(a && b);
  for (size_t n : {size_t{0}, size_t{1}, size_t{4096}, size_t{64} << 20}) {
    std::vector<uint8_t> src = Pattern(n, 7), dst(n + 1, 0xee);
    auto rx = b->StartReceive(42, dst.data(), n);
    auto tx = a->StartSend(b->address(), 42, src.data(), n);
    ASSERT_TRUE(tx->Wait(Soon()).ok()) << n;
    ASSERT_TRUE(rx->Wait(Soon()).ok()) << n;
    EXPECT_EQ(rx->received_bytes(), n);
    EXPECT_TRUE(std::equal(src.begin(), src.end(), dst.begin())) << n;
    EXPECT_EQ(dst[n], 0xee) << "nothing written past the buffer";
  }
  EXPECT_EQ(a->in_flight(), 0);
  EXPECT_EQ(b->in_flight(), 0);
}

// A peer that sends less than a receive asked for must not make the
// receive look complete: the rest of the buffer holds what it held before
// (in an agent, a recycled block's earlier bytes).
TEST_P(UcxWorkerTest, AShortMessageIsDataLossNotAReceive) {
  auto a = Make(GetParam()), b = Make(GetParam());
  ASSERT_TRUE(a && b);
  for (size_t n : {size_t{4096}, size_t{4} << 20}) {
    std::vector<uint8_t> src(1, 9), dst(n, 0xee);
    absl::Status ended = absl::UnknownError("not ended");
    absl::Notification seen;
    auto rx = b->StartReceive(43, dst.data(), n, [&](const absl::Status& s) {
      ended = s;
      seen.Notify();
    });
    auto tx = a->StartSend(b->address(), 43, src.data(), 1);
    ASSERT_TRUE(tx->Wait(Soon()).ok()) << n;
    absl::Status s = rx->Wait(Soon());
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << n << s;
    EXPECT_EQ(s.message(),
              absl::StrCat("ucx: a message of 1 bytes came where ", n, " were expected."));
    ASSERT_TRUE(seen.WaitForNotificationWithTimeout(absl::Seconds(30)));
    EXPECT_EQ(ended.code(), absl::StatusCode::kDataLoss);
  }
}

TEST_P(UcxWorkerTest, ManyTransfersAtOnceFromManyThreadsMatchTheirTags) {
  auto a = Make(GetParam()), b = Make(GetParam());
  ASSERT_TRUE(a && b);
  constexpr int kThreads = 8, kEach = 8;
  constexpr size_t kBytes = 256 << 10;
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        const uint64_t tag = (uint64_t{1} << 40) | (t << 8) | i;
        std::vector<uint8_t> src = Pattern(kBytes, static_cast<uint8_t>(tag)), dst(kBytes);
        auto tx = a->StartSend(b->address(), tag, src.data(), kBytes);  // before the receive
        auto rx = b->StartReceive(tag, dst.data(), kBytes);
        if (!tx->Wait(Soon()).ok() || !rx->Wait(Soon()).ok() || dst != src) ++wrong;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
}

TEST_P(UcxWorkerTest, AReceiveThatNothingMatchesEndsAtItsDeadlineAndLetsGo) {
  auto b = Make(GetParam());
  ASSERT_TRUE(b);
  std::vector<uint8_t> dst(1024);
  auto rx = b->StartReceive(7, dst.data(), dst.size());
  absl::Status s = rx->Wait(absl::Now() + absl::Milliseconds(50));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_EQ(b->in_flight(), 0);  // UCX no longer holds the buffer
  auto cancelled = b->StartReceive(8, dst.data(), dst.size());
  cancelled->Cancel();
  EXPECT_EQ(cancelled->Wait(Soon()).code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(b->in_flight(), 0);
}

TEST_P(UcxWorkerTest, MoreBytesThanTheBufferHoldsIsOutOfRange) {
  auto a = Make(GetParam()), b = Make(GetParam());
  ASSERT_TRUE(a && b);
  std::vector<uint8_t> src(1 << 20, 1), dst(1024);
  auto rx = b->StartReceive(9, dst.data(), dst.size());
  auto tx = a->StartSend(b->address(), 9, src.data(), src.size());
  EXPECT_EQ(rx->Wait(Soon()).code(), absl::StatusCode::kOutOfRange);
  // The sender may or may not hear of it; either way it ends.
  tx->Wait(absl::Now() + absl::Seconds(2)).IgnoreError();
}

// A cancelled send the peer takes (or throws away) ends by itself: the
// connection stays up for what comes next.
TEST_P(UcxWorkerTest, ACancelledSendLeavesTheConnectionUp) {
  auto a = Make(GetParam()), b = Make(GetParam());
  ASSERT_TRUE(a && b);
  std::vector<uint8_t> src = Pattern(64 << 20, 3), dst(src.size());
  auto rx = b->StartReceive(5, dst.data(), dst.size());
  auto tx = a->StartSend(b->address(), 5, src.data(), src.size());
  tx->Cancel();
  const absl::Status sent = tx->Wait(Soon());
  EXPECT_TRUE(sent.ok() || absl::IsCancelled(sent)) << sent;
  ASSERT_TRUE(rx->Wait(Soon()).ok());
  EXPECT_EQ(dst, src);
  EXPECT_EQ(a->endpoints(), 1u);
  rx = b->StartReceive(6, dst.data(), 100);
  tx = a->StartSend(b->address(), 6, src.data(), 100);
  EXPECT_TRUE(tx->Wait(Soon()).ok());
  EXPECT_TRUE(rx->Wait(Soon()).ok());
}

// A cancelled send to a peer that takes nothing (stuck) ends once its grace
// ran out, by closing the endpoint; the next send makes a new one.
TEST(UcxWorkerCancelTest, ASendToAStuckPeerEndsAfterItsGrace) {
  Worker::Options o;
  o.transports = "tcp";
  o.send_cancel_grace = absl::Milliseconds(200);
  auto a = Worker::Create(o);
  auto b = Make("tcp");
  ASSERT_TRUE(a.ok() && b);
  absl::Notification go;
  b->RunOnThread([&go] { go.WaitForNotification(); });  // b takes nothing
  std::vector<uint8_t> src = Pattern(64 << 20, 4), dst(src.size());
  auto tx = (*a)->StartSend(b->address(), 7, src.data(), src.size());
  const absl::Time start = absl::Now();
  tx->Cancel();
  EXPECT_EQ(tx->Wait(Soon()).code(), absl::StatusCode::kCancelled);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(150));
  EXPECT_EQ((*a)->in_flight(), 0);
  go.Notify();
  auto rx = b->StartReceive(8, dst.data(), 100);
  tx = (*a)->StartSend(b->address(), 8, src.data(), 100);
  EXPECT_TRUE(tx->Wait(Soon()).ok());
  EXPECT_TRUE(rx->Wait(Soon()).ok());
}

// A call holds its peer's endpoint between its transfers: past
// max_endpoints, the endpoints closed to make room are only those no call
// holds, and with every one held a new peer gets none: the cap is hard.
TEST(UcxWorkerEndpointTest, AHeldEndpointIsNeverClosedToMakeRoomAndTheCapIsHard) {
  Worker::Options o;
  o.transports = "tcp";
  o.max_endpoints = 2;
  auto a = Worker::Create(o);
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = Make("tcp"), c = Make("tcp"), d = Make("tcp");
  ASSERT_TRUE(b && c && d);
  auto send = [&](Worker& to) {
    uint8_t byte = 1, got = 0;
    auto rx = to.StartReceive(7, &got, 1);
    EXPECT_TRUE((*a)->StartSend(to.address(), 7, &byte, 1)->Wait(Soon()).ok());
    EXPECT_TRUE(rx->Wait(Soon()).ok());
  };
  std::shared_ptr<void> hold_b = (*a)->HoldPeer(b->address());
  send(*b);
  send(*c);
  send(*d);  // c is not held: it goes
  (*a)->Flush();
  EXPECT_EQ((*a)->endpoints(), 2u);
  std::shared_ptr<void> hold_d = (*a)->HoldPeer(d->address());
  uint8_t byte = 1;
  absl::Status refused = (*a)->StartSend(c->address(), 7, &byte, 1)->Wait(Soon());
  // b and d are held: c gets none
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(refused.message(),
            "ucx: all 2 of this worker's endpoints are in use (--ucx_max_endpoints). This peer "
            "gets none now.");
  (*a)->Flush();
  EXPECT_EQ((*a)->endpoints(), 2u);
  hold_b.reset();
  send(*c);  // now b may go
  (*a)->Flush();
  EXPECT_EQ((*a)->endpoints(), 2u);
}

TEST(UcxWorkerStopTest, DestroyingAWorkerCancelsWhatIsInFlight) {
  std::vector<uint8_t> dst(4096);
  std::shared_ptr<Transfer> rx;
  {
    auto b = Make();
    ASSERT_TRUE(b);
    rx = b->StartReceive(11, dst.data(), dst.size());
  }
  EXPECT_EQ(rx->Wait(Soon()).code(), absl::StatusCode::kCancelled);
}

TEST(UcxWorkerOptionsTest, UnknownTransportsAreRefused) {
  Worker::Options o;
  o.transports = "carrier-pigeon";
  auto w = Worker::Create(o);
  EXPECT_FALSE(w.ok());
}

// TCP alone goes eagerly (Worker::eager), and only TCP alone; UCX_RNDV_THRESH
// in the environment is the operator's, and wins.
TEST(UcxWorkerEagerTest, TcpAloneGoesEagerlyUnlessUcxRndvThreshSaysOtherwise) {
  const char* tls = std::getenv("UCX_TLS");
  const std::string saved = tls != nullptr ? tls : "";
  unsetenv("UCX_TLS");
  auto eager = [](const std::string& transports) {
    Worker::Options o;
    o.transports = transports;
    auto w = Worker::Create(o);
    EXPECT_TRUE(w.ok()) << transports << ": " << w.status();
    return w.ok() && (*w)->eager();
  };
  EXPECT_TRUE(eager("tcp"));
  EXPECT_FALSE(eager(""));
  EXPECT_FALSE(eager("tcp,posix"));
  setenv("UCX_TLS", "tcp", 1);
  EXPECT_TRUE(eager(""));
  setenv("UCX_RNDV_THRESH", "65536", 1);
  EXPECT_FALSE(eager(""));
  EXPECT_FALSE(eager("tcp"));
  unsetenv("UCX_RNDV_THRESH");
  if (tls != nullptr) {
    setenv("UCX_TLS", saved.c_str(), 1);
  } else {
    unsetenv("UCX_TLS");
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, UcxWorkerTest, ::testing::Values("", "tcp"),
                         [](const auto& info) {
                           return info.param.empty() ? std::string("Default") : info.param;
                         });

}  // namespace
}  // namespace farcall::ucx
