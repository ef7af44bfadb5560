#include "core/ucx/transfer_set.h"

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "openssl/rand.h"

namespace farcall::ucx {

uint64_t NewCallTag() {
  // Not a seeded generator: its next tags could be told from a few seen.
  uint64_t tag = 0;
  while (tag == 0) {
    if (RAND_bytes(reinterpret_cast<unsigned char*>(&tag), sizeof(tag)) != 1) std::abort();
    tag &= kCallTagMask;
  }
  return tag;
}

std::vector<Piece> PiecesOf(const std::vector<int64_t>& sizes) {
  std::vector<Piece> out;
  for (size_t i = 0; i < sizes.size(); ++i) {
    for (int64_t off = 0; off < sizes[i]; off += kPieceBytes) {
      out.push_back({i, off, std::min(kPieceBytes, sizes[i] - off)});
    }
  }
  return out;
}

std::shared_ptr<TransferSet> TransferSet::Create(Worker& worker,
                                                 std::function<void(const absl::Status&)> on_end) {
  return std::shared_ptr<TransferSet>(new TransferSet(worker, std::move(on_end)));
}

bool TransferSet::Begin() {
  absl::MutexLock l(&mu_);
  if (cancelled_) return false;
  ++pending_;
  return true;
}

void TransferSet::AddSend(const std::string& peer, uint64_t tag, const void* data, int64_t size,
                          std::function<void(const absl::Status&)> then) {
  if (!Begin()) return;
  std::shared_ptr<TransferSet> self = shared_from_this();
  std::shared_ptr<Transfer> t = worker_.StartSend(
      peer, tag, data, static_cast<size_t>(size),
      [self, then = std::move(then), bytes = DataBytes(tag, size)](const absl::Status& s) {
        if (then) then(s);
        self->End(s, bytes);
      });
  bool cancelled;
  {
    absl::MutexLock l(&mu_);
    transfers_.push_back(t);
    cancelled = cancelled_;
  }
  if (cancelled) t->Cancel();
}

void TransferSet::AddReceive(uint64_t tag, void* data, int64_t size,
                             std::function<void(const absl::Status&)> then) {
  if (!Begin()) return;
  std::shared_ptr<TransferSet> self = shared_from_this();
  std::shared_ptr<Transfer> t = worker_.StartReceive(
      tag, data, static_cast<size_t>(size),
      [self, then = std::move(then), bytes = DataBytes(tag, size)](const absl::Status& s) {
        // Before End: what `then` adds keeps the set open.
        if (then) then(s);
        self->End(s, bytes);
      });
  bool cancelled;
  {
    absl::MutexLock l(&mu_);
    transfers_.push_back(t);
    cancelled = cancelled_;
  }
  if (cancelled) t->Cancel();
}

void TransferSet::Fail(const absl::Status& why) {
  std::vector<std::shared_ptr<Transfer>> rest;
  {
    absl::MutexLock l(&mu_);
    if (why.ok() || !status_.ok()) return;
    status_ = why;
    // One piece failed: the call failed; end the others now.
    if (!cancelled_) {
      cancelled_ = true;
      rest = transfers_;
    }
  }
  for (const auto& t : rest) {
    if (!t->done()) t->Cancel();
  }
}

void TransferSet::End(const absl::Status& s, int64_t data_bytes) {
  Fail(s);
  if (on_each_) on_each_(s.ok() ? data_bytes : 0);
  mu_.Lock();
  --pending_;
  MaybeFinish();
}

void TransferSet::Seal() {
  mu_.Lock();
  sealed_ = true;
  MaybeFinish();
}

void TransferSet::MaybeFinish() {
  if (!sealed_ || pending_ > 0 || finishing_) {
    mu_.Unlock();
    return;
  }
  finishing_ = true;
  absl::Status s = status_;
  mu_.Unlock();
  auto finish = [self = shared_from_this(), s] {
    // Before Wait returns: what on_end touches may go once it does.
    if (self->on_end_) self->on_end_(s);
    absl::MutexLock l(&self->mu_);
    self->ended_ = true;
  };
  // Always on the worker's thread, and never inside a caller's Seal or
  // Cancel (even one on that thread), which may hold locks on_end takes.
  worker_.RunOnThread(std::move(finish));
}

void TransferSet::Cancel() {
  std::vector<std::shared_ptr<Transfer>> all;
  {
    absl::MutexLock l(&mu_);
    if (status_.ok()) status_ = absl::CancelledError("ucx: the call's transfers were cancelled.");
    if (cancelled_) return;
    cancelled_ = true;
    all = transfers_;
  }
  for (const auto& t : all) {
    if (!t->done()) t->Cancel();
  }
  // Nothing more starts: it ends once what was cancelled let go.
  mu_.Lock();
  sealed_ = true;
  MaybeFinish();
}

absl::Status TransferSet::Wait(absl::Time deadline) {
  absl::MutexLock l(&mu_);
  if (mu_.AwaitWithDeadline(absl::Condition(&ended_), deadline)) return status_;
  mu_.Unlock();
  Cancel();
  mu_.Lock();
  mu_.Await(absl::Condition(&ended_));
  if (status_.ok()) return status_;
  return absl::DeadlineExceededError("ucx: the call's transfers did not end before its deadline.");
}

bool TransferSet::ended() const {
  absl::MutexLock l(&mu_);
  return ended_;
}

}  // namespace farcall::ucx
