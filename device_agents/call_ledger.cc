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

CallLedger::Claim CallLedger::Begin(const CallKey& key, absl::Time now) {
  absl::MutexLock l(&mu_);
  ExpireLocked(now);
  Claim c;
  auto it = entries_.find(Id(key.principal, key.call_id));
  if (it == entries_.end()) {
    // The id is held twice: the map's key and the expiry queue's entry.
    const int64_t cost =
        static_cast<int64_t>(2 * (key.principal.size() + key.call_id.size()) + key.digest.size()) +
        kEntryOverheadBytes;
    // A caller past its share is refused before it takes anything; the
    // others' ids and answers stay.
    if (!key.principal.empty()) {
      auto mine = caller_bytes_.find(key.principal);
      const int64_t held = mine != caller_bytes_.end() ? mine->second : 0;
      const int64_t limit = CallerLimit(key);
      if (held + cost > limit && limit < options_.max_bytes) {
        c.run = false;
        c.status = absl::ResourceExhaustedError(absl::StrCat(
            "this caller's share of the agent's exactly-once ledger is full (", held,
            " bytes of call_ids and kept answers, ",
            key.share_bytes > 0 ? "ledger_bytes=" : "--call_id_cache_bytes_per_tenant=", limit,
            key.share_bytes > 0 ? " on its tokens-file line" : "",
            "); a call with side effects is never run unrecorded: retry once earlier ids "
            "expire (--call_id_ttl)."));
        return c;
      }
    }
    // Kept answers make room for ids; ids never make room for each other,
    // and a call with side effects never runs unrecorded.
    id_bytes_ += cost;
    MakeRoomLocked();
    if (entries_.size() >= options_.max_ids || id_bytes_ > options_.max_bytes) {
      id_bytes_ -= cost;
      c.run = false;
      c.status = absl::ResourceExhaustedError(absl::StrCat(
          "this agent's exactly-once ledger is full (", entries_.size(), " call_ids in ",
          id_bytes_ + kept_bytes_, " bytes, --call_id_cache_bytes=", options_.max_bytes,
          "); a call with side effects is never run unrecorded: retry later."));
      return c;
    }
    Entry& e = entries_[Id(key.principal, key.call_id)];
    e.digest = key.digest;
    e.cost = cost;
    ChargeLocked(key.principal, cost);
    return c;
  }
  c.run = false;
  const Entry& e = it->second;
  if (e.digest != key.digest) {
    c.status = absl::InvalidArgumentError(
        absl::StrCat("call_id ", Shown(key.call_id),
                     " was already used for another call (another handler, specs or "
                     "attributes); a call_id names one call."));
  } else if (e.running) {
    c.status = absl::AlreadyExistsError(
        absl::StrCat("call ", Shown(key.call_id),
                     " is running on this agent; a call with side effects is never run twice."));
  } else if (e.answer.has_value()) {
    c.status = e.status;
    c.answer = e.answer;
  } else {
    c.status = absl::AlreadyExistsError(absl::StrCat(
        "call ", Shown(key.call_id), " already ran on this agent (",
        absl::StatusCodeToString(e.status.code()),
        "); its answer was not kept (only unary answers of at most ", options_.max_answer_bytes,
        " bytes are), and a call with side effects is never run twice."));
  }
  return c;
}

void CallLedger::Ran(const CallKey& key, const absl::Status& status, const grpc::ByteBuffer* answer,
                     absl::Time now) {
  absl::MutexLock l(&mu_);
  auto it = entries_.find(Id(key.principal, key.call_id));
  if (it == entries_.end() || !it->second.running) return;
  Entry& e = it->second;
  e.running = false;
  e.status = status;
  e.expires = now + options_.ttl;
  ended_.emplace_back(e.expires, it->first);
  const int64_t bytes = answer != nullptr ? static_cast<int64_t>(answer->Length()) : 0;
  // Within the caller's share only: a caller past it keeps its ids (and
  // exactly-once), not its answers.
  auto mine = caller_bytes_.find(key.principal);
  const bool within_share = key.principal.empty() || mine == caller_bytes_.end() ||
                            mine->second + bytes <= CallerLimit(key);
  if (answer != nullptr && bytes <= options_.max_answer_bytes && within_share) {
    // Shares the message's slices; no copy.
    e.answer = *answer;
    e.bytes = bytes;
    kept_bytes_ += bytes;
    ChargeLocked(key.principal, bytes);
    kept_.emplace_back(e.expires, it->first);
    MakeRoomLocked();
  }
}

void CallLedger::Forget(const CallKey& key) {
  absl::MutexLock l(&mu_);
  auto it = entries_.find(Id(key.principal, key.call_id));
  if (it != entries_.end() && it->second.running) EraseLocked(it);
}

size_t CallLedger::size() const {
  absl::MutexLock l(&mu_);
  return entries_.size();
}

int64_t CallLedger::kept_bytes() const {
  absl::MutexLock l(&mu_);
  return kept_bytes_;
}

int64_t CallLedger::id_bytes() const {
  absl::MutexLock l(&mu_);
  return id_bytes_;
}

int64_t CallLedger::caller_bytes(const std::string& principal) const {
  absl::MutexLock l(&mu_);
  auto it = caller_bytes_.find(principal);
  return it != caller_bytes_.end() ? it->second : 0;
}

void CallLedger::ExpireLocked(absl::Time now) {
  while (!ended_.empty() && ended_.front().first <= now) {
    auto it = entries_.find(ended_.front().second);
    // The id may have been claimed afresh since (it expired, then came back).
    if (it != entries_.end() && !it->second.running && it->second.expires == ended_.front().first) {
      EraseLocked(it);
    }
    ended_.pop_front();
  }
  while (!kept_.empty() && kept_.front().first <= now) kept_.pop_front();
}

void CallLedger::MakeRoomLocked() {
  // The oldest answers go (their ids stay). An entry of `kept_` whose id
  // expired, or was claimed afresh, is passed over; each is popped once.
  while (id_bytes_ + kept_bytes_ > options_.max_bytes && !kept_.empty()) {
    auto old = entries_.find(kept_.front().second);
    if (old != entries_.end() && old->second.expires == kept_.front().first) {
      DropAnswerLocked(old->first.first, old->second);
    }
    kept_.pop_front();
  }
}

void CallLedger::EraseLocked(std::map<Id, Entry>::iterator it) {
  DropAnswerLocked(it->first.first, it->second);
  id_bytes_ -= it->second.cost;
  ChargeLocked(it->first.first, -it->second.cost);
  entries_.erase(it);
}

void CallLedger::DropAnswerLocked(const std::string& principal, Entry& e) {
  if (!e.answer.has_value()) return;
  kept_bytes_ -= e.bytes;
  ChargeLocked(principal, -e.bytes);
  e.bytes = 0;
  e.answer.reset();
}

void CallLedger::ChargeLocked(const std::string& principal, int64_t bytes) {
  if (principal.empty() || bytes == 0) return;
  int64_t& held = caller_bytes_[principal];
  held += bytes;
  if (held <= 0) caller_bytes_.erase(principal);
}

}  // namespace farcall::agent
