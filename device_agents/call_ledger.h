// Exactly-once for calls with side effects. A client names each call with a
// fresh call_id and reuses it when it retries (after a lost answer, say);
// the agent remembers the call_ids of calls with has_side_effect, so that a
// repeated one never runs twice:
//   - while the first is running: ALREADY_EXISTS, "... is running";
//   - once it ran: the answer it got, replayed byte for byte, when the
//     answer was kept (a unary answer of at most `max_answer_bytes`);
//     otherwise ALREADY_EXISTS, "... already ran; its answer was not kept".
// A call that ended before its handler ran (refused, cancelled while
// waiting) is forgotten: running it later is its first run.
//
// Ids are kept for `ttl` (--call_id_ttl) and answers within `max_bytes`
// (--call_id_cache_bytes); past either the oldest go first, and a retry that
// late runs again. Calls without has_side_effect, or without a call_id, are
// not recorded: running them again is harmless.
//
// Thread safety: thread-safe.
#ifndef FARCALL_DEVICE_AGENTS_CALL_LEDGER_H_
#define FARCALL_DEVICE_AGENTS_CALL_LEDGER_H_

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/support/byte_buffer.h"

namespace farcall::agent {

class CallLedger {
 public:
  struct Options {
    absl::Duration ttl = absl::Minutes(10);
    int64_t max_bytes = int64_t{256} << 20;        // kept answers, all together
    int64_t max_answer_bytes = int64_t{16} << 20;  // one kept answer
    size_t max_ids = 1 << 20;
  };
  // What to do with a call.
  struct Claim {
    bool run = true;                         // a first run: go on
    absl::Status status;                     // else its answer's status...
    std::optional<grpc::ByteBuffer> answer;  // ...and message, when kept
  };

  CallLedger() : CallLedger(Options()) {}
  explicit CallLedger(Options options) : options_(options) {}

  // Records `call_id` as running, or says how a repeat is answered.
  Claim Begin(const std::string& call_id, absl::Time now = absl::Now());
  // The handler ran and the call ended with `status`; `answer` is its
  // unary response message (null for a streamed call, never kept).
  void Ran(const std::string& call_id, const absl::Status& status, const grpc::ByteBuffer* answer,
           absl::Time now = absl::Now());
  // The call ended before its handler ran: forget it.
  void Forget(const std::string& call_id);

  size_t size() const;
  int64_t kept_bytes() const;

 private:
  struct Entry {
    bool running = true;
    absl::Time expires;
    absl::Status status;
    std::optional<grpc::ByteBuffer> answer;
    int64_t bytes = 0;
  };
  void ExpireLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DropAnswerLocked(Entry& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  mutable absl::Mutex mu_;
  std::map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
  // Ids in the order they ended, for expiry and for dropping the oldest
  // answers first.
  std::deque<std::pair<absl::Time, std::string>> ended_ ABSL_GUARDED_BY(mu_);
  int64_t kept_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace farcall::agent

#endif  // FARCALL_DEVICE_AGENTS_CALL_LEDGER_H_
