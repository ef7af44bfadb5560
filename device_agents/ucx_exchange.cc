#include "device_agents/ucx_exchange.h"

#include <algorithm>
#include <type_traits>
#include <utility>

#include "absl/time/time.h"
#include "core/ucx/piece_mac.h"
#include "core/ucx/piece_transfers.h"
#include "core/ucx/transfer_set.h"
#include "core/ucx/ucx_worker.h"
#include "core/wire/protocol.h"

namespace farcall::agent {

static_assert(kUcxKeyBytes == ucx::kMacKeyBytes);
static_assert(std::is_same_v<std::array<uint8_t, 24>, ucx::ReadyBytes>);

bool UcxBuiltIn() { return true; }

absl::StatusOr<std::shared_ptr<ucx::Worker>> StartUcxWorker(const UcxWorkerOptions& options) {
  ucx::Worker::Options o;
  o.transports = options.transports;
  o.max_endpoints = options.max_endpoints;
  // Clients send only what the agent asked for (core/ucx/transfer_set.h):
  // anything else is thrown away, so that nobody can park bytes here.
  o.discard_unexpected = true;
  absl::StatusOr<std::unique_ptr<ucx::Worker>> w = ucx::Worker::Create(o);
  if (!w.ok()) return w.status();
  return std::shared_ptr<ucx::Worker>(*std::move(w));
}

std::string UcxWorkerAddress(const ucx::Worker& worker) { return worker.address(); }

bool UcxIntegrityFailure(const absl::Status& s) { return ucx::IsIntegrityFailure(s); }

UcxCallExchange::UcxCallExchange(ucx::Worker& worker, const v1::UcxTensors& header)
    : worker_(worker), header_(header) {}

UcxCallExchange::~UcxCallExchange() {
  if (set_ != nullptr && !set_->ended() && !worker_.OnThread()) {
    set_->Cancel();
    set_->Wait(absl::InfiniteFuture()).IgnoreError();
  }
}

void UcxCallExchange::ReceiveArgs(const std::vector<int64_t>& sizes,
                                  const std::vector<uint8_t*>& places,
                                  std::function<void(int64_t)> progress, Range checked,
                                  std::function<void(const absl::Status&)> done) {
  // The client's endpoint stays open for the whole call (inputs, results).
  peer_hold_ = worker_.HoldPeer(header_.worker_address());
  set_ = ucx::TransferSet::Create(worker_, std::move(done));
  set_->OnEachEnd(std::move(progress));
  // The args come under a tag of this agent's choosing, so that no caller
  // can post its receives under another call's tag; each piece is checked.
  const uint64_t tag = ucx::NewCallTag();
  std::function<void(const ucx::Piece&)> each;
  if (checked) {
    each = [checked = std::move(checked)](const ucx::Piece& p) {
      checked(p.tensor, p.offset, p.size);
    };
  }
  ucx::ReceivePieces(*set_, header_.key(), tag, ucx::Carries::kArg, ucx::PiecesOf(sizes), places,
                     std::move(each));
  // Only now may the client send: every piece has its receive.
  ready_ = ucx::ReadyMessage(header_.key(), tag);
  set_->AddSend(header_.worker_address(), ucx::TagOf(header_.tag(), ucx::Carries::kReady, 0),
                ready_.data(), ucx::kReadyBytes);
  set_->Seal();
}

void UcxCallExchange::SendResults(const std::vector<int64_t>& sizes,
                                  const std::vector<const uint8_t*>& data,
                                  std::function<void(int64_t)> progress,
                                  std::function<void(const absl::Status&)> done) {
  set_ = ucx::TransferSet::Create(worker_, std::move(done));
  set_->OnEachEnd(std::move(progress));
  // Each piece's MAC is computed here while the pieces before it go.
  ucx::SendPieces(*set_, header_.worker_address(), header_.tag(), ucx::Carries::kResult,
                  ucx::PiecesOf(sizes), data, header_.key());
  set_->Seal();
}

void UcxCallExchange::Cancel() {
  if (set_ != nullptr) set_->Cancel();
}

}  // namespace farcall::agent
