// Exactly-once for calls with side effects. A client names each call with a
// fresh call_id and reuses it when it retries (after a lost answer, say);
// the agent remembers the call_ids of calls with has_side_effect, so that a
// repeated one never runs twice. A call is known by its CallKey: the
// caller's principal and call_id (one caller's id never reaches another
// caller's entry, nor its answer), and a digest of what the header asks
// for. A repeat:
//   - while the first is running: ALREADY_EXISTS, "... is running";
//   - once it ran: the answer it got, replayed byte for byte, when the
//     answer was kept (a unary answer of at most `max_answer_bytes`);
//     otherwise ALREADY_EXISTS, "... already ran; its answer was not kept";
//   - with the same id but another digest (another handler, specs or
//     attributes): INVALID_ARGUMENT, for an id names one call.
// A call that ended before its handler ran (refused, cancelled while
// waiting) is forgotten: running it later is its first run.
//
// Ids are kept for `ttl` (--call_id_ttl); a retry that late runs again. Ids
// (each at its size plus kEntryOverheadBytes) and kept answers together stay
// within `max_bytes` (--call_id_cache_bytes) and `max_ids`: the oldest
// answers go first to make room (their ids stay), and when the ids alone
// fill it a new call is refused with RESOURCE_EXHAUSTED, never run
// unrecorded. Calls without has_side_effect, or without a call_id, are not
// recorded: running them again is harmless.
//
// One caller (a principal: a token, or the caller a router's capability
// names) holds at most `max_bytes_per_caller` of it, ids and kept answers
// together (--call_id_cache_bytes_per_tenant), so that no caller can fill
// the ledger and have every other caller's calls with side effects
// refused: past its share its new calls are refused and its answers no
// longer kept, while others' calls run. Calls without a principal (an
// agent without tokens, where every caller is one) have no share but the
// whole.
//
// Thread safety: thread-safe.
#ifndef FARCALL_DEVICE_AGENTS_CALL_LEDGER_H_
#define FARCALL_DEVICE_AGENTS_CALL_LEDGER_H_

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/support/byte_buffer.h"

namespace farcall::agent {

// Who makes a call and what it asks for.
struct CallKey {
  std::string principal;  // the caller (core/tokens.h); "" without tokens
  std::string call_id;
  std::string digest;  // HeaderDigest() of the call's header
  // The caller's share of the ledger from its tokens-file line
  // (`ledger_bytes=`); 0: Options::max_bytes_per_caller. Not part of the
  // call's identity.
  int64_t share_bytes = 0;
};

class CallLedger {
 public:
  // What one remembered id costs beyond its bytes (the map's node, its
  // place in the expiry queue, the digest).
  static constexpr int64_t kEntryOverheadBytes = 256;

  struct Options {
    absl::Duration ttl = absl::Minutes(10);
    int64_t max_bytes = int64_t{256} << 20;        // ids and kept answers, all together
    int64_t max_answer_bytes = int64_t{16} << 20;  // one kept answer
    size_t max_ids = 1 << 20;
    // One principal's ids and kept answers; 0: a quarter of `max_bytes`.
    int64_t max_bytes_per_caller = 0;
  };
  // What to do with a call.
  struct Claim {
    bool run = true;                         // a first run: go on
    absl::Status status;                     // else its answer's status...
    std::optional<grpc::ByteBuffer> answer;  // ...and message, when kept
  };

  CallLedger() : CallLedger(Options()) {}
  explicit CallLedger(Options options) : options_(options) {}

  // Records the call as running, or says how a repeat is answered.
  Claim Begin(const CallKey& key, absl::Time now = absl::Now());
  // The handler ran and the call ended with `status`; `answer` is its
  // unary response message (null for a streamed call, never kept).
  void Ran(const CallKey& key, const absl::Status& status, const grpc::ByteBuffer* answer,
           absl::Time now = absl::Now());
  // The call ended before its handler ran: forget it.
  void Forget(const CallKey& key);

  size_t size() const;
  int64_t kept_bytes() const;  // answers
  int64_t id_bytes() const;    // ids, with their overhead
  // One caller's ids (with their overhead) and kept answers.
  int64_t caller_bytes(const std::string& principal) const;

 private:
  using Id = std::pair<std::string, std::string>;  // principal, call_id
  struct Entry {
    std::string digest;
    int64_t cost = 0;  // counted in id_bytes_
    bool running = true;
    absl::Time expires;
    absl::Status status;
    std::optional<grpc::ByteBuffer> answer;
    int64_t bytes = 0;
  };
  void ExpireLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DropAnswerLocked(const std::string& principal, Entry& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Adds `bytes` (negative: takes away) to the principal's share.
  void ChargeLocked(const std::string& principal, int64_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int64_t CallerLimit(const CallKey& key) const {
    if (key.share_bytes > 0) return key.share_bytes;
    return options_.max_bytes_per_caller > 0 ? options_.max_bytes_per_caller
                                             : options_.max_bytes / 4;
  }
  void EraseLocked(std::map<Id, Entry>::iterator it) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops the oldest answers until ids and answers fit `max_bytes`: each
  // answer is looked at once, however often the ledger is full (amortized
  // O(1) per call).
  void MakeRoomLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  mutable absl::Mutex mu_;
  std::map<Id, Entry> entries_ ABSL_GUARDED_BY(mu_);
  // Ids in the order they ended, for expiry; those whose answers were kept,
  // in the same order, for dropping the oldest answers first.
  std::deque<std::pair<absl::Time, Id>> ended_ ABSL_GUARDED_BY(mu_);
  std::deque<std::pair<absl::Time, Id>> kept_ ABSL_GUARDED_BY(mu_);
  int64_t kept_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // Each named principal's ids and kept answers (absent: none).
  absl::flat_hash_map<std::string, int64_t> caller_bytes_ ABSL_GUARDED_BY(mu_);
  int64_t id_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace farcall::agent

#endif  // FARCALL_DEVICE_AGENTS_CALL_LEDGER_H_
