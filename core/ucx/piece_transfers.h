// A call's tensors over UCX, authenticated: each piece is followed by its
// MAC (piece_mac.h), a message of its own under the same number (kMacs);
// the receiver checks each piece once it and its MAC have both landed, on
// the worker's thread, and fails the set at the first that does not match,
// before its bytes are used. Checks run while later pieces still travel,
// and a sender computes each MAC while the pieces before it travel.
//
//   sender:   SendPieces(set, peer, tag, Carries::kArg, pieces, data, key);
//   receiver: ReceivePieces(set, key, tag, Carries::kArg, pieces, places);
//
// A failed check ends the set with DATA_LOSS "ucx: piece K of the call's
// args (results) failed its integrity check: ..." (IsIntegrityFailure).
//
// The agent picks the tag its receives are posted under (a fresh one per
// call, so that no caller can name another's), and says it in the ready
// message: the tag and its MAC (ReadyMessage, ReadReady).
#ifndef FARCALL_CORE_UCX_PIECE_TRANSFERS_H_
#define FARCALL_CORE_UCX_PIECE_TRANSFERS_H_

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/ucx/transfer_set.h"

namespace farcall::ucx {

// The ready message: the agent's tag (8 bytes, little-endian) and its MAC.
inline constexpr size_t kReadyBytes = 24;
using ReadyBytes = std::array<uint8_t, kReadyBytes>;
ReadyBytes ReadyMessage(absl::string_view key, uint64_t agent_tag);
// The agent's tag; DATA_LOSS (IsIntegrityFailure) when the MAC is not the
// call's, or the tag is not a call tag.
absl::StatusOr<uint64_t> ReadReady(absl::string_view key, const ReadyBytes& ready);

// Whether `s` is a failed integrity check (of a piece or the ready message).
bool IsIntegrityFailure(const absl::Status& s);

// The MACs of `pieces` of the tensors at `data` under the call's `key`
// (kMacKeyBytes), kMacBytes each, in order; `what` is kArg or kResult.
std::shared_ptr<const std::vector<uint8_t>> MacListOf(absl::string_view key, Carries what,
                                                      const std::vector<Piece>& pieces,
                                                      const std::vector<const uint8_t*>& data);

// How many of one call's pieces one side sends at once. UCX sends on a
// connection in order, so a message posted after a call's pieces (the
// agent's ready for the next call, a rendezvous reply for a transfer the
// other way) waits behind the pieces already posted: with every piece of a
// 256 MiB call posted at once, a second call from the same client waited
// for the first one's whole download before its upload could start, and two
// calls ran one after the other. With a window it waits behind at most
// this many pieces. 4 (16 MiB) rather than 16: two calls at once over a 2
// Gbit/s link moved 0.72-0.90x of it (median 0.80x, five runs) against
// 0.70-0.80x, with no loss uncapped (docs/performance.md).
inline constexpr size_t kSendWindow = 4;

// Adds to `set` the sends of `pieces` (messages 0.. of kind `what` under
// `call_tag`) to `peer`, kSendWindow at a time, each followed by its MAC:
// from `macs` (MacListOf), or computed here under `key` while the first
// pieces go. `then_each`, if given, runs (worker's thread) as each piece's
// send ended. Call before Seal: later pieces start from their
// predecessors' ends.
void SendPieces(TransferSet& set, const std::string& peer, uint64_t call_tag, Carries what,
                const std::vector<Piece>& pieces, const std::vector<const uint8_t*>& data,
                std::shared_ptr<const std::vector<uint8_t>> macs,
                std::function<void(const absl::Status&)> then_each = nullptr);
void SendPieces(TransferSet& set, const std::string& peer, uint64_t call_tag, Carries what,
                const std::vector<Piece>& pieces, const std::vector<const uint8_t*>& data,
                absl::string_view key);

// Adds to `set` the receives of `pieces` into `places` (one per tensor) and
// of the sender's MAC list, each piece checked under `key`. `checked`, if
// given, runs (worker's thread) as each piece passed its check, before the
// set counts it as ended: its bytes may be used from then on.
void ReceivePieces(TransferSet& set, absl::string_view key, uint64_t call_tag, Carries what,
                   const std::vector<Piece>& pieces, const std::vector<uint8_t*>& places,
                   std::function<void(const Piece&)> checked = nullptr);

}  // namespace farcall::ucx

#endif  // FARCALL_CORE_UCX_PIECE_TRANSFERS_H_
