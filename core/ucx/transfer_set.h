// One call's tensors over UCX: the tags both sides agree on, and a set of
// transfers that ends as one.
//
// A call's tensors move in pieces of at most kPieceBytes, each its own
// tagged message, so that several are in flight at once. Tags are
//   [63..24] the call's 40 random bits (CallHeader.ucx.tag)
//   [23..22] what it carries: kReady, kArg, kResult or kMacs
//   [21..0]  the piece's number among the call's args (or results), in
//            order: tensor 0's pieces, then tensor 1's, ...
// The exchange, which never lets a message arrive before its receive is
// posted (both workers discard what arrives unasked):
//   client: posts receives for every result piece and for kReady; sends
//           the header over gRPC;
//   agent:  posts receives for every arg piece, then sends kReady;
//   client: on kReady sends the arg pieces;
//   agent:  runs the handler, sends the result pieces, waits for them to
//           end, then answers the gRPC call;
//   client: on the answer waits for its result pieces.
//
// Thread safety: TransferSet is thread-safe.
#ifndef FARCALL_CORE_UCX_TRANSFER_SET_H_
#define FARCALL_CORE_UCX_TRANSFER_SET_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/ucx/ucx_worker.h"

namespace farcall::ucx {

// kMacs: the MAC of the piece of the same number (piece_mac.h).
enum class Carries : uint64_t { kReady = 0, kArg = 1, kResult = 2, kMacs = 3 };

inline constexpr int64_t kPieceBytes = int64_t{4} << 20;
inline constexpr uint64_t kCallTagMask = ~((uint64_t{1} << 24) - 1);
// At most this many pieces each way per call (16 TiB in 4 MiB pieces).
inline constexpr int64_t kMaxPieces = int64_t{1} << 22;

inline uint64_t TagOf(uint64_t call_tag, Carries what, uint64_t piece) {
  return (call_tag & kCallTagMask) | (static_cast<uint64_t>(what) << 22) | piece;
}
// What a tag's transfer carries.
inline Carries CarriesOf(uint64_t tag) { return static_cast<Carries>((tag >> 22) & 3); }
// The bytes of a transfer under `tag` that are tensor data (an arg's or a
// result's piece); 0 for the ready message and MACs.
inline int64_t DataBytes(uint64_t tag, int64_t size) {
  const Carries c = CarriesOf(tag);
  return c == Carries::kArg || c == Carries::kResult ? size : 0;
}

// A fresh call tag: 40 bits from the operating system's random source in
// the top of the word (never zero).
uint64_t NewCallTag();

// Pieces of `sizes` (bytes of each tensor), in tag order.
struct Piece {
  size_t tensor = 0;
  int64_t offset = 0;
  int64_t size = 0;
};
std::vector<Piece> PiecesOf(const std::vector<int64_t>& sizes);

class TransferSet : public std::enable_shared_from_this<TransferSet> {
 public:
  // `on_end` runs once when the set was sealed (or cancelled) and every
  // transfer in it ended: with OK, or the first error. It runs on the
  // worker's thread, never inside Seal or Cancel, and must not block.
  static std::shared_ptr<TransferSet> Create(Worker& worker,
                                             std::function<void(const absl::Status&)> on_end);

  // Each transfer that ended, on the worker's thread, with the tensor bytes
  // it moved (DataBytes: 0 for a ready message, a MAC, or a failure): what
  // counts as a client's progress. Set before the first Add.
  void OnEachEnd(std::function<void(int64_t data_bytes)> f) { on_each_ = std::move(f); }
  // `then`, if given, runs (worker's thread) when that transfer ended,
  // before the set counts it as ended: it may add more.
  void AddSend(const std::string& peer, uint64_t tag, const void* data, int64_t size,
               std::function<void(const absl::Status&)> then = nullptr);
  void AddReceive(uint64_t tag, void* data, int64_t size,
                  std::function<void(const absl::Status&)> then = nullptr);
  // No more transfers; the end may come now.
  void Seal();
  // Ends what is in flight (CANCELLED) and seals the set: later Adds start
  // nothing.
  void Cancel();
  // Ends the set with `why` (unless it failed already): what is in flight is
  // cancelled, later Adds start nothing. For a `then` that finds its
  // transfer's bytes wrong.
  void Fail(const absl::Status& why);
  // Blocks until the set ended and `on_end` returned; at `deadline` cancels
  // it first. Not on the worker's thread.
  absl::Status Wait(absl::Time deadline);
  bool ended() const;

 private:
  TransferSet(Worker& worker, std::function<void(const absl::Status&)> on_end)
      : worker_(worker), on_end_(std::move(on_end)) {}
  // Before a transfer starts; false when the set was cancelled.
  bool Begin();
  void End(const absl::Status& s, int64_t data_bytes);
  void MaybeFinish() ABSL_UNLOCK_FUNCTION(mu_);

  Worker& worker_;
  std::function<void(const absl::Status&)> on_end_;
  std::function<void(int64_t)> on_each_;
  mutable absl::Mutex mu_;
  std::vector<std::shared_ptr<Transfer>> transfers_ ABSL_GUARDED_BY(mu_);
  int pending_ ABSL_GUARDED_BY(mu_) = 0;
  bool sealed_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;  // on_end runs or ran
  bool ended_ ABSL_GUARDED_BY(mu_) = false;      // on_end returned
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace farcall::ucx

#endif  // FARCALL_CORE_UCX_TRANSFER_SET_H_
