// Refused calls (a bad or missing token, a handler the caller may not call,
// a limit) as audit lines that a flood cannot multiply. The first refusal of
// a (peer address, principal, reason) in an interval is logged at once, as a
// warning naming them and why; the rest of that interval's refusals of the
// same key are counted, and one line gives their count when the interval
// ends:
//   audit: refused (auth) call of 'copy' from ipv4:10.0.0.7 by -: UNAUTHENTICATED: ...
//   audit: 3999 more refusals (auth) from ipv4:10.0.0.7 by - in the last 10s
// Agents and routers log refusals only through here. At most kMaxKeys keys
// are kept per interval, and of them at most kMaxAnonymousKeys of callers
// who are not known (principal "-", keyed by an address such a caller may
// vary), so that they cannot crowd out known callers; refusals past that
// are counted per reason alone. "in the last ..." is the time since the
// interval began (at exit, shorter than the interval), in whole seconds.
//
// Thread safety: every function may be called from any thread.
#ifndef FARCALL_CORE_REFUSAL_AUDIT_H_
#define FARCALL_CORE_REFUSAL_AUDIT_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <tuple>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace farcall {

class RefusalAudit {
 public:
  static constexpr size_t kMaxKeys = 1024;
  static constexpr size_t kMaxAnonymousKeys = kMaxKeys / 2;
  struct Refusal {
    absl::string_view peer;       // gRPC's peer string; its port is dropped
    absl::string_view principal;  // the caller's (core/tokens.h), or empty
    absl::string_view reason;     // the refused-calls counter's reason label
    absl::string_view handler;
    absl::string_view code;  // the status code's name
    absl::string_view message;
  };
  // A line to write, with the fields of log::CallFields it names.
  using Sink = std::function<void(const std::string& line, const Refusal& fields)>;

  // The process's audit: 10 s intervals, lines to the log (core/log.h) as
  // warnings; a thread of its own writes each interval's counts.
  static RefusalAudit& Get();
  // Writes the process's audit's counts so far, if it has any: for a
  // process about to exit.
  static void FlushProcessAudit();

  // `now`: the clock (tests set one).
  RefusalAudit(
      absl::Duration interval, Sink sink,
      std::function<absl::Time()> now = [] { return absl::Now(); });
  void Note(const Refusal& refusal);
  // Writes the counts of the interval so far and starts a new one (the
  // process's audit does this every interval).
  void Flush();

  absl::Duration interval() const { return interval_; }

 private:
  using Key = std::tuple<std::string, std::string, std::string>;  // peer, principal, reason
  const absl::Duration interval_;
  const Sink sink_;
  const std::function<absl::Time()> now_;
  absl::Mutex mu_;
  absl::Time started_ ABSL_GUARDED_BY(mu_);         // when this interval began
  size_t anonymous_keys_ ABSL_GUARDED_BY(mu_) = 0;  // of more_'s, principal "-"
  // Refusals after the first, per key, this interval.
  std::map<Key, uint64_t> more_ ABSL_GUARDED_BY(mu_);
  // Refusals past kMaxKeys keys, per reason.
  std::map<std::string, uint64_t> overflow_ ABSL_GUARDED_BY(mu_);
};

// "ipv4:10.0.0.7:41234" -> "ipv4:10.0.0.7", "ipv6:[::1]:5" -> "ipv6:[::1]".
std::string PeerAddress(absl::string_view peer);

}  // namespace farcall

#endif  // FARCALL_CORE_REFUSAL_AUDIT_H_
