#include "core/ucx/piece_transfers.h"

#include <atomic>
#include <cstring>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "core/ucx/piece_mac.h"

namespace farcall::ucx {
namespace {

constexpr char kIntegrityPayload[] = "farcall.ucx/integrity";

absl::Status IntegrityFailure(std::string message) {
  absl::Status s = absl::DataLossError(message);
  s.SetPayload(kIntegrityPayload, absl::Cord("1"));
  return s;
}

const char* NameOf(Carries what) { return what == Carries::kArg ? "args" : "results"; }

// One receiving side's state; touched on the worker's thread only (every
// `then` runs there).
struct Checker {
  Checker(absl::string_view key, Carries what, std::vector<Piece> pieces,
          std::vector<uint8_t*> places)
      : mac(key),
        what(what),
        pieces(std::move(pieces)),
        places(std::move(places)),
        landed(this->pieces.size(), 0),
        macs(this->pieces.size() * kMacBytes) {}

  // Piece k or its MAC landed; once both did, OK or the DATA_LOSS that ends
  // the set.
  absl::Status Landed(size_t k) {
    if (++landed[k] < 2) return absl::OkStatus();
    const Piece& p = pieces[k];
    if (mac.Check(what, k, places[p.tensor] + p.offset, static_cast<size_t>(p.size),
                  macs.data() + k * kMacBytes)) {
      if (checked) checked(p);
      return absl::OkStatus();
    }
    return IntegrityFailure(
        absl::StrCat("ucx: piece ", k, " of the call's ", NameOf(what),
                     " failed its integrity check: bytes the other side did not send reached this "
                     "call (another UCX peer that knows its tag), and none of them is used."));
  }

  PieceMac mac;
  const Carries what;
  const std::vector<Piece> pieces;
  const std::vector<uint8_t*> places;
  std::vector<uint8_t> landed;  // 0, 1 (the piece or its MAC), 2 (both)
  std::vector<uint8_t> macs;
  std::function<void(const Piece&)> checked;  // each piece that passed
};

// One side's piece sends, at most kSendWindow at once: piece k + window
// starts as piece k's send ends (on the worker's thread, from its `then`,
// which keeps the set open). Touched on the worker's thread once started.
struct Window : std::enable_shared_from_this<Window> {
  TransferSet* set;  // outlives its transfers' callbacks
  std::string peer;
  uint64_t call_tag;
  Carries what;
  std::vector<Piece> pieces;
  std::vector<const uint8_t*> data;
  std::function<void(const absl::Status&)> then_each;
  std::atomic<size_t> next{0};

  void SendNext() {
    const size_t k = next.fetch_add(1);
    if (k >= pieces.size()) return;
    const Piece& p = pieces[k];
    set->AddSend(peer, TagOf(call_tag, what, k), data[p.tensor] + p.offset, p.size,
                 [self = shared_from_this()](const absl::Status& st) {
                   if (self->then_each) self->then_each(st);
                   if (st.ok()) self->SendNext();  // a failed send ends the set anyway
                 });
  }
};

// The sends of one side's pieces, each followed by its MAC at `macs`
// (which `keep` holds until sent); with `fill`, MAC k is computed into
// `writable` (= macs) here, after the first pieces started, and its send
// posted at once (MACs are 16 bytes; the receiver checks a piece once both
// landed, in whichever order).
void SendEach(TransferSet& set, const std::string& peer, uint64_t call_tag, Carries what,
              const std::vector<Piece>& pieces, const std::vector<const uint8_t*>& data,
              const uint8_t* macs, uint8_t* writable, std::shared_ptr<const void> keep,
              PieceMac* fill, const std::function<void(const absl::Status&)>& then_each) {
  auto window = std::make_shared<Window>();
  window->set = &set;
  window->peer = peer;
  window->call_tag = call_tag;
  window->what = what;
  window->pieces = pieces;
  window->data = data;
  window->then_each = then_each;
  for (size_t i = 0; i < kSendWindow; ++i) window->SendNext();
  for (size_t k = 0; k < pieces.size(); ++k) {
    if (fill != nullptr) {
      const Piece& p = pieces[k];
      const Mac mac = fill->Of(what, k, data[p.tensor] + p.offset, static_cast<size_t>(p.size));
      std::memcpy(writable + k * kMacBytes, mac.data(), kMacBytes);
    }
    set.AddSend(peer, TagOf(call_tag, Carries::kMacs, k), macs + k * kMacBytes, kMacBytes,
                [keep](const absl::Status&) {});
  }
}

}  // namespace

ReadyBytes ReadyMessage(absl::string_view key, uint64_t agent_tag) {
  ReadyBytes r{};
  for (int i = 0; i < 8; ++i) r[i] = static_cast<uint8_t>(agent_tag >> (8 * i));
  PieceMac mac(key);
  const Mac m = mac.Of(Carries::kReady, 0, r.data(), 8);
  std::memcpy(r.data() + 8, m.data(), kMacBytes);
  return r;
}

absl::StatusOr<uint64_t> ReadReady(absl::string_view key, const ReadyBytes& ready) {
  uint64_t tag = 0;
  for (int i = 0; i < 8; ++i) tag |= static_cast<uint64_t>(ready[i]) << (8 * i);
  PieceMac mac(key);
  if (!mac.Check(Carries::kReady, 0, ready.data(), 8, ready.data() + 8) || tag == 0 ||
      (tag & ~kCallTagMask) != 0) {
    return IntegrityFailure(
        "ucx: the call's ready message failed its integrity check: another UCX peer that "
        "knows the call's tag sent it; no arg was sent.");
  }
  return tag;
}

bool IsIntegrityFailure(const absl::Status& s) {
  return absl::IsDataLoss(s) && s.GetPayload(kIntegrityPayload).has_value();
}

std::shared_ptr<const std::vector<uint8_t>> MacListOf(absl::string_view key, Carries what,
                                                      const std::vector<Piece>& pieces,
                                                      const std::vector<const uint8_t*>& data) {
  PieceMac mac(key);
  return std::make_shared<const std::vector<uint8_t>>(mac.ListOf(what, pieces, data));
}

void SendPieces(TransferSet& set, const std::string& peer, uint64_t call_tag, Carries what,
                const std::vector<Piece>& pieces, const std::vector<const uint8_t*>& data,
                std::shared_ptr<const std::vector<uint8_t>> macs,
                std::function<void(const absl::Status&)> then_each) {
  const uint8_t* m = macs->data();
  SendEach(set, peer, call_tag, what, pieces, data, m, nullptr, std::move(macs), nullptr,
           then_each);
}

void SendPieces(TransferSet& set, const std::string& peer, uint64_t call_tag, Carries what,
                const std::vector<Piece>& pieces, const std::vector<const uint8_t*>& data,
                absl::string_view key) {
  PieceMac mac(key);
  auto macs = std::make_shared<std::vector<uint8_t>>(pieces.size() * kMacBytes);
  uint8_t* m = macs->data();
  SendEach(set, peer, call_tag, what, pieces, data, m, m, std::move(macs), &mac, nullptr);
}

void ReceivePieces(TransferSet& set, absl::string_view key, uint64_t call_tag, Carries what,
                   const std::vector<Piece>& pieces, const std::vector<uint8_t*>& places,
                   std::function<void(const Piece&)> checked) {
  if (pieces.empty()) return;
  auto c = std::make_shared<Checker>(key, what, pieces, places);
  c->checked = std::move(checked);
  TransferSet* s = &set;  // outlives its transfers' callbacks
  for (size_t k = 0; k < pieces.size(); ++k) {
    const Piece& p = pieces[k];
    auto landed = [c, s, k](const absl::Status& st) {
      if (st.ok()) s->Fail(c->Landed(k));
    };
    set.AddReceive(TagOf(call_tag, what, k), places[p.tensor] + p.offset, p.size, landed);
    set.AddReceive(TagOf(call_tag, Carries::kMacs, k), c->macs.data() + k * kMacBytes, kMacBytes,
                   landed);
  }
}

}  // namespace farcall::ucx
