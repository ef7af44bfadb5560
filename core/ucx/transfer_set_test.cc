#include "core/ucx/transfer_set.h"

#include <atomic>
#include <vector>

#include "absl/synchronization/notification.h"
#include "core/ucx/test_workers.h"
#include "gtest/gtest.h"

namespace farcall::ucx {
namespace {

TEST(PiecesTest, CutEachTensorInOrderAndSkipEmptyOnes) {
  const int64_t p = kPieceBytes;
  std::vector<Piece> v = PiecesOf({2 * p + 1, 0, 5});
  ASSERT_EQ(v.size(), 4u);
  EXPECT_EQ(v[0].tensor, 0u);
  EXPECT_EQ(v[2].offset, 2 * p);
  EXPECT_EQ(v[2].size, 1);
  EXPECT_EQ(v[3].tensor, 2u);
  EXPECT_EQ(v[3].size, 5);
}

TEST(TagsTest, CallTagsAreRandomAndLeaveRoomForPieces) {
  const uint64_t a = NewCallTag(), b = NewCallTag();
  EXPECT_NE(a, b);
  EXPECT_EQ(a & ~kCallTagMask, 0u);
  EXPECT_NE(TagOf(a, Carries::kArg, 3), TagOf(a, Carries::kResult, 3));
  EXPECT_EQ(TagOf(a, Carries::kArg, 3) & kCallTagMask, a);
}

// The exchange of transfer_set.h: the receiver posts, says ready, and only
// then do the pieces go.
TEST(TransferSetTest, PiecesArriveAfterReadyAndTheSetsEndOnce) {
  auto a = TcpWorker(), b = TcpWorker();
  ASSERT_TRUE(a && b);
  const uint64_t call = NewCallTag();
  const std::vector<int64_t> sizes = {kPieceBytes * 3 + 17, 1, 0};
  std::vector<std::vector<uint8_t>> src, dst;
  for (size_t i = 0; i < sizes.size(); ++i) {
    src.emplace_back(sizes[i]);
    for (int64_t k = 0; k < sizes[i]; ++k) src[i][k] = static_cast<uint8_t>(k * 7 + i);
    dst.emplace_back(sizes[i], 0);
  }
  std::atomic<int> ends{0};
  auto sender = TransferSet::Create(*a, [&](const absl::Status&) { ++ends; });
  uint8_t ready = 0;
  const std::vector<Piece> pieces = PiecesOf(sizes);
  sender->AddReceive(TagOf(call, Carries::kReady, 0), &ready, 1, [&](const absl::Status& s) {
    if (!s.ok()) return;
    for (size_t k = 0; k < pieces.size(); ++k) {
      const Piece& p = pieces[k];
      sender->AddSend(b->address(), TagOf(call, Carries::kArg, k), src[p.tensor].data() + p.offset,
                      p.size);
    }
  });
  sender->Seal();
  a->Flush();
  auto receiver = TransferSet::Create(*b, [&](const absl::Status&) { ++ends; });
  for (size_t k = 0; k < pieces.size(); ++k) {
    const Piece& p = pieces[k];
    receiver->AddReceive(TagOf(call, Carries::kArg, k), dst[p.tensor].data() + p.offset, p.size);
  }
  receiver->Seal();
  static const uint8_t kOne = 1;
  receiver->AddSend(a->address(), TagOf(call, Carries::kReady, 0), &kOne, 1);
  EXPECT_TRUE(receiver->Wait(Soon()).ok());
  EXPECT_TRUE(sender->Wait(Soon()).ok());
  EXPECT_EQ(src, dst);
  EXPECT_EQ(ends.load(), 2);
  EXPECT_EQ(a->discarded() + b->discarded(), 0);
}

TEST(TransferSetTest, CancelEndsEverythingAndLetsGoOfTheMemory) {
  auto a = TcpWorker();
  ASSERT_TRUE(a);
  std::vector<uint8_t> buf(1 << 20);
  absl::Notification ended;
  absl::Status got;
  auto set = TransferSet::Create(*a, [&](const absl::Status& s) {
    got = s;
    ended.Notify();
  });
  for (int k = 0; k < 4; ++k) set->AddReceive(NewCallTag(), buf.data(), 1 << 18);
  set->Cancel();
  ASSERT_TRUE(ended.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_EQ(got.code(), absl::StatusCode::kCancelled);
  set->AddReceive(1, buf.data(), 1);  // starts nothing now
  EXPECT_EQ(a->in_flight(), 0);
}

TEST(TransferSetTest, AWaitPastItsDeadlineCancels) {
  auto a = TcpWorker();
  ASSERT_TRUE(a);
  uint8_t byte = 0;
  auto set = TransferSet::Create(*a, nullptr);
  set->AddReceive(NewCallTag(), &byte, 1);
  set->Seal();
  EXPECT_EQ(set->Wait(absl::Now() + absl::Milliseconds(50)).code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(a->in_flight(), 0);
}

// Whatever a peer sends unasked is thrown away, large or small, and the
// sender is let go.
TEST(TransferSetTest, UnaskedMessagesAreDiscarded) {
  auto a = TcpWorker(), b = TcpWorker();
  ASSERT_TRUE(a && b);
  std::vector<uint8_t> big(8 << 20, 1), small(100, 2);
  auto t1 = a->StartSend(b->address(), NewCallTag(), big.data(), big.size());
  auto t2 = a->StartSend(b->address(), NewCallTag(), small.data(), small.size());
  t1->Wait(Soon()).IgnoreError();
  t2->Wait(Soon()).IgnoreError();
  EXPECT_TRUE(t1->done() && t2->done());
  for (int i = 0; i < 3000 && b->discarded() < 2; ++i) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_EQ(b->discarded(), 2);
  EXPECT_EQ(a->in_flight(), 0);
  EXPECT_EQ(b->in_flight(), 0);
}

}  // namespace
}  // namespace farcall::ucx
