#include "device_agents/call_ledger.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace farcall::agent {
namespace {

// The id as an error message may show it: it is the client's own string.
std::string Shown(const std::string& call_id) {
  std::string out;
  for (char c : call_id.substr(0, 64)) out.push_back(c >= 0x21 && c <= 0x7e ? c : '?');
  return out;
}

}  // namespace

CallLedger::Claim CallLedger::Begin(const std::string& call_id, absl::Time now) {
  absl::MutexLock l(&mu_);
  ExpireLocked(now);
  auto [it, inserted] = entries_.try_emplace(call_id);
  Claim c;
  if (inserted) {
    if (entries_.size() > options_.max_ids) {
      // Too many at once: this call runs unrecorded rather than not at all.
      entries_.erase(it);
    }
    return c;
  }
  c.run = false;
  const Entry& e = it->second;
  if (e.running) {
    c.status =
        absl::AlreadyExistsError(absl::StrCat("call ", Shown(call_id),
                                              " is running on this agent; a call with side effects "
                                              "is never run twice."));
  } else if (e.answer.has_value()) {
    c.status = e.status;
    c.answer = e.answer;
  } else {
    c.status = absl::AlreadyExistsError(absl::StrCat(
        "call ", Shown(call_id), " already ran on this agent (",
        absl::StatusCodeToString(e.status.code()),
        "); its answer was not kept (only unary answers of at most ", options_.max_answer_bytes,
        " bytes are), and a call with side effects is never run "
        "twice."));
  }
  return c;
}

void CallLedger::Ran(const std::string& call_id, const absl::Status& status,
                     const grpc::ByteBuffer* answer, absl::Time now) {
  absl::MutexLock l(&mu_);
  auto it = entries_.find(call_id);
  if (it == entries_.end() || !it->second.running) return;
  Entry& e = it->second;
  e.running = false;
  e.status = status;
  e.expires = now + options_.ttl;
  ended_.emplace_back(e.expires, call_id);
  const int64_t bytes = answer != nullptr ? static_cast<int64_t>(answer->Length()) : 0;
  if (answer != nullptr && bytes <= options_.max_answer_bytes) {
    // Shares the message's slices; no copy.
    e.answer = *answer;
    e.bytes = bytes;
    kept_bytes_ += bytes;
    // Room for it: the oldest answers go (their ids stay).
    for (auto& [expires, id] : ended_) {
      if (kept_bytes_ <= options_.max_bytes) break;
      auto old = entries_.find(id);
      if (old != entries_.end() && old->second.expires == expires) DropAnswerLocked(old->second);
    }
  }
}

void CallLedger::Forget(const std::string& call_id) {
  absl::MutexLock l(&mu_);
  auto it = entries_.find(call_id);
  if (it != entries_.end() && it->second.running) entries_.erase(it);
}

size_t CallLedger::size() const {
  absl::MutexLock l(&mu_);
  return entries_.size();
}

int64_t CallLedger::kept_bytes() const {
  absl::MutexLock l(&mu_);
  return kept_bytes_;
}

void CallLedger::ExpireLocked(absl::Time now) {
  while (!ended_.empty() && ended_.front().first <= now) {
    auto it = entries_.find(ended_.front().second);
    // The id may have been claimed afresh since (it expired, then came back).
    if (it != entries_.end() && !it->second.running && it->second.expires == ended_.front().first) {
      DropAnswerLocked(it->second);
      entries_.erase(it);
    }
    ended_.pop_front();
  }
}

void CallLedger::DropAnswerLocked(Entry& e) {
  if (!e.answer.has_value()) return;
  kept_bytes_ -= e.bytes;
  e.bytes = 0;
  e.answer.reset();
}

}  // namespace farcall::agent
