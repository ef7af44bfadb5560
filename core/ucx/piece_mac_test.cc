#include "core/ucx/piece_mac.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "absl/synchronization/notification.h"
#include "core/ucx/piece_transfers.h"
#include "core/ucx/test_workers.h"
#include "gtest/gtest.h"

namespace farcall::ucx {
namespace {

std::vector<uint8_t> Bytes(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 31 + seed);
  return v;
}

TEST(PieceMacTest, KeysAreFreshAndTheMacBindsKeyBytesKindAndNumber) {
  const std::string k1 = NewMacKey(), k2 = NewMacKey();
  ASSERT_EQ(k1.size(), kMacKeyBytes);
  EXPECT_NE(k1, k2);
  std::vector<uint8_t> b = Bytes(1000, 1);
  PieceMac m1(k1), m2(k2);
  const Mac base = m1.Of(Carries::kArg, 3, b.data(), b.size());
  EXPECT_EQ(m1.Of(Carries::kArg, 3, b.data(), b.size()), base);
  EXPECT_TRUE(m1.Check(Carries::kArg, 3, b.data(), b.size(), base.data()));
  EXPECT_NE(m2.Of(Carries::kArg, 3, b.data(), b.size()), base);
  EXPECT_NE(m1.Of(Carries::kResult, 3, b.data(), b.size()), base);
  EXPECT_NE(m1.Of(Carries::kArg, 4, b.data(), b.size()), base);
  EXPECT_NE(m1.Of(Carries::kArg, 3, b.data(), b.size() - 1), base);
  b[999] ^= 1;
  EXPECT_FALSE(m1.Check(Carries::kArg, 3, b.data(), b.size(), base.data()));
  // An empty piece has a MAC too.
  const Mac empty = m1.Of(Carries::kArg, 0, nullptr, 0);
  EXPECT_TRUE(m1.Check(Carries::kArg, 0, nullptr, 0, empty.data()));
}

TEST(PieceMacTest, TheReadyMessageNamesTheTagOnlyUnderTheCallsKey) {
  const std::string key = NewMacKey();
  const uint64_t tag = NewCallTag();
  ReadyBytes r = ReadyMessage(key, tag);
  absl::StatusOr<uint64_t> read = ReadReady(key, r);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, tag);
  read = ReadReady(NewMacKey(), r);
  EXPECT_TRUE(IsIntegrityFailure(read.status())) << read.status();
  r[0] ^= 0x80;  // a forger's tag under the old MAC
  read = ReadReady(key, r);
  EXPECT_TRUE(IsIntegrityFailure(read.status()));
  EXPECT_EQ(read.status().message(),
            "ucx: the call's ready message failed its integrity check: another UCX peer that "
            "knows the call's tag sent it; no arg was sent.");
}

struct Tensors {
  explicit Tensors(const std::vector<int64_t>& sizes) : pieces(PiecesOf(sizes)) {
    for (size_t i = 0; i < sizes.size(); ++i) {
      src.push_back(Bytes(sizes[i], static_cast<uint8_t>(i)));
      dst.emplace_back(sizes[i], 0);
    }
  }
  std::vector<const uint8_t*> From() const {
    std::vector<const uint8_t*> v;
    for (const auto& s : src) v.push_back(s.data());
    return v;
  }
  std::vector<uint8_t*> Into() {
    std::vector<uint8_t*> v;
    for (auto& d : dst) v.push_back(d.data());
    return v;
  }
  std::vector<Piece> pieces;
  std::vector<std::vector<uint8_t>> src, dst;
};

TEST(PieceTransfersTest, PiecesAndTheirMacsArriveChecked) {
  auto a = TcpWorker(), b = TcpWorker();
  ASSERT_TRUE(a && b);
  const std::string key = NewMacKey();
  const uint64_t tag = NewCallTag();
  Tensors t({kPieceBytes * 2 + 5, 0, 3});
  auto rx = TransferSet::Create(*b, nullptr);
  // Each piece is reported once, when its bytes are all there (worker's
  // thread only: no lock).
  std::vector<int> reported(t.pieces.size(), 0);
  bool early = false;
  ReceivePieces(*rx, key, tag, Carries::kArg, t.pieces, t.Into(), [&](const Piece& p) {
    for (size_t k = 0; k < t.pieces.size(); ++k) {
      const Piece& q = t.pieces[k];
      if (q.tensor != p.tensor || q.offset != p.offset) continue;
      ++reported[k];
      early |= !std::equal(t.src[p.tensor].begin() + p.offset,
                           t.src[p.tensor].begin() + p.offset + p.size,
                           t.dst[p.tensor].begin() + p.offset);
    }
  });
  rx->Seal();
  b->Flush();
  auto tx = TransferSet::Create(*a, nullptr);
  SendPieces(*tx, b->address(), tag, Carries::kArg, t.pieces, t.From(), key);
  tx->Seal();
  EXPECT_TRUE(tx->Wait(Soon()).ok());
  EXPECT_TRUE(rx->Wait(Soon()).ok());
  EXPECT_EQ(t.src, t.dst);
  EXPECT_EQ(reported, std::vector<int>(t.pieces.size(), 1));
  EXPECT_FALSE(early) << "a piece was reported before its bytes landed";
}

// The forger of defect 6: a third worker that knows the call's tag sends a
// piece of its own, which lands first. The receiver finds it out once the
// MAC list arrives, and the set fails; the real piece, now unasked, is
// thrown away. Bytes under another key fail the same way.
TEST(PieceTransfersTest, AThirdWorkersPieceUnderTheCallsTagFailsItsCheck) {
  auto a = TcpWorker(), b = TcpWorker(), forger = TcpWorker();
  ASSERT_TRUE(a && b && forger);
  const std::string key = NewMacKey();
  const uint64_t tag = NewCallTag();
  // One piece: the forger's lands first, in the posted receive.
  Tensors t({kPieceBytes});
  auto rx = TransferSet::Create(*b, nullptr);
  absl::Notification landed;  // the first receive to end: the forged piece
  std::atomic<bool> once{false};
  rx->OnEachEnd([&](int64_t) {
    if (!once.exchange(true)) landed.Notify();
  });
  std::atomic<bool> reported{false};  // a forged piece is never reported
  ReceivePieces(*rx, key, tag, Carries::kArg, t.pieces, t.Into(),
                [&](const Piece&) { reported = true; });
  rx->Seal();
  b->Flush();
  std::vector<uint8_t> forged(kPieceBytes, 0xEE);
  auto f =
      forger->StartSend(b->address(), TagOf(tag, Carries::kArg, 0), forged.data(), forged.size());
  ASSERT_TRUE(f->Wait(Soon()).ok());
  ASSERT_TRUE(landed.WaitForNotificationWithTimeout(absl::Seconds(30)));
  ASSERT_EQ(t.dst[0], forged) << "the forged piece did not land first";
  auto tx = TransferSet::Create(*a, nullptr);
  SendPieces(*tx, b->address(), tag, Carries::kArg, t.pieces, t.From(), key);
  tx->Seal();
  absl::Status s = rx->Wait(Soon());
  EXPECT_TRUE(IsIntegrityFailure(s)) << s;
  EXPECT_EQ(s.message(),
            "ucx: piece 0 of the call's args failed its integrity check: bytes the other side did "
            "not send reached this call (another UCX peer that knows its tag), and none of them "
            "is used.");
  tx->Wait(Soon()).IgnoreError();  // the real piece is taken and thrown away
  EXPECT_FALSE(reported.load());
  EXPECT_GE(b->discarded(), 1);
  EXPECT_EQ(b->in_flight(), 0);
}

TEST(PieceTransfersTest, AMacListUnderAnotherKeyFailsThePiecesThatLanded) {
  auto a = TcpWorker(), b = TcpWorker();
  ASSERT_TRUE(a && b);
  const uint64_t tag = NewCallTag();
  Tensors t({100, 200});
  auto rx = TransferSet::Create(*b, nullptr);
  ReceivePieces(*rx, NewMacKey(), tag, Carries::kResult, t.pieces, t.Into());
  rx->Seal();
  b->Flush();
  auto tx = TransferSet::Create(*a, nullptr);
  const std::string other = NewMacKey();
  SendPieces(*tx, b->address(), tag, Carries::kResult, t.pieces, t.From(),
             MacListOf(other, Carries::kResult, t.pieces, t.From()));
  tx->Seal();
  absl::Status s = rx->Wait(Soon());
  EXPECT_TRUE(IsIntegrityFailure(s)) << s;
  EXPECT_NE(s.message().find("of the call's results failed its integrity check"),
            absl::string_view::npos);
  tx->Wait(Soon()).IgnoreError();
}

// UCX sends on a connection in order: a message posted while a call's
// pieces travel (the agent's ready for the next call) waits behind the
// pieces already posted. SendPieces keeps kSendWindow of them in flight, so
// that message waits behind a few pieces, not the whole call.
TEST(PieceTransfersTest, AMessagePostedMidCallWaitsBehindAWindowNotTheWholeCall) {
  auto a = TcpWorker(), b = TcpWorker();
  ASSERT_TRUE(a && b);
  const std::string key = NewMacKey();
  const uint64_t tag = NewCallTag(), next_call = NewCallTag();
  constexpr int64_t kPieces = 32;
  Tensors t({kPieceBytes * kPieces});
  std::atomic<int64_t> pieces_landed{0};
  std::atomic<int64_t> landed_before_ready{-1};
  auto rx = TransferSet::Create(*b, nullptr);
  rx->OnEachEnd([&](int64_t) { ++pieces_landed; });  // pieces and MACs: 2 per piece
  ReceivePieces(*rx, key, tag, Carries::kArg, t.pieces, t.Into());
  uint8_t ready = 0;
  rx->AddReceive(TagOf(next_call, Carries::kReady, 0), &ready, 1,
                 [&](const absl::Status&) { landed_before_ready = pieces_landed.load(); });
  rx->Seal();
  b->Flush();
  auto tx = TransferSet::Create(*a, nullptr);
  std::atomic<bool> posted{false};
  const uint8_t one = 1;
  SendPieces(*tx, b->address(), tag, Carries::kArg, t.pieces, t.From(),
             MacListOf(key, Carries::kArg, t.pieces, t.From()), [&](const absl::Status& s) {
               // Once the first piece went, the rest of the call is under way.
               if (s.ok() && !posted.exchange(true)) {
                 tx->AddSend(b->address(), TagOf(next_call, Carries::kReady, 0), &one, 1);
               }
             });
  tx->Seal();
  ASSERT_TRUE(tx->Wait(Soon()).ok());
  ASSERT_TRUE(rx->Wait(Soon()).ok());
  EXPECT_EQ(t.src, t.dst);
  // MACs (16 bytes each) all go at the start; the ready then waits for the
  // pieces ahead of it: a window's worth, and the ones that began meanwhile.
  const int64_t pieces_before = landed_before_ready.load() - kPieces;
  EXPECT_GE(landed_before_ready.load(), 0);
  EXPECT_LE(pieces_before, static_cast<int64_t>(2 * kSendWindow))
      << "the message waited behind " << pieces_before << " of " << kPieces << " pieces";
}

}  // namespace
}  // namespace farcall::ucx
