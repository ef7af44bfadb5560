#include "core/refusal_audit.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/log.h"

namespace farcall {

std::string PeerAddress(absl::string_view peer) {
  const size_t colon = peer.rfind(':');
  const size_t bracket = peer.rfind(']');
  // "ipv4:HOST:PORT" or "ipv6:[HOST]:PORT": drop what follows the last
  // colon when it is a port (after the host, not inside an IPv6 address).
  if (colon == absl::string_view::npos || peer.find(':') == colon) return std::string(peer);
  if (bracket != absl::string_view::npos && colon < bracket) return std::string(peer);
  return std::string(peer.substr(0, colon));
}

namespace {
std::atomic<RefusalAudit*> process_audit{nullptr};
}  // namespace

RefusalAudit& RefusalAudit::Get() {
  static RefusalAudit* audit = [] {
    auto* a = new RefusalAudit(absl::Seconds(10), [](const std::string& line, const Refusal& r) {
      log::Write(log::Level::kWarning, line, {"", r.handler, r.principal, r.peer, r.code});
    });
    // Never destroyed, never joined: it lives as long as the process.
    std::thread([a] {
      for (;;) {
        absl::SleepFor(a->interval());
        a->Flush();
      }
    }).detach();
    process_audit.store(a);
    return a;
  }();
  return *audit;
}

void RefusalAudit::FlushProcessAudit() {
  if (RefusalAudit* a = process_audit.load(); a != nullptr) a->Flush();
}

RefusalAudit::RefusalAudit(absl::Duration interval, Sink sink, std::function<absl::Time()> now)
    : interval_(interval), sink_(std::move(sink)), now_(std::move(now)), started_(now_()) {}

void RefusalAudit::Note(const Refusal& refusal) {
  const std::string peer = PeerAddress(refusal.peer);
  const std::string principal = refusal.principal.empty() ? "-" : std::string(refusal.principal);
  {
    absl::MutexLock l(&mu_);
    Key key(peer, principal, std::string(refusal.reason));
    auto it = more_.find(key);
    if (it != more_.end()) {
      ++it->second;
      return;
    }
    const bool anonymous = principal == "-";
    if (more_.size() >= kMaxKeys || (anonymous && anonymous_keys_ >= kMaxAnonymousKeys)) {
      ++overflow_[std::string(refusal.reason)];
      return;
    }
    anonymous_keys_ += anonymous ? 1 : 0;
    more_.emplace(std::move(key), 0);
  }
  Refusal shown = refusal;
  shown.peer = peer;
  shown.principal = principal;
  sink_(absl::StrCat("audit: refused (", refusal.reason, ") call of '",
                     refusal.handler.empty() ? "-" : refusal.handler, "' from ", peer, " by ",
                     principal, ": ", refusal.code, ": ", refusal.message.substr(0, 256)),
        shown);
}

void RefusalAudit::Flush() {
  std::map<Key, uint64_t> more;
  std::map<std::string, uint64_t> overflow;
  absl::Duration elapsed;
  {
    absl::MutexLock l(&mu_);
    more.swap(more_);
    overflow.swap(overflow_);
    anonymous_keys_ = 0;
    const absl::Time now = now_();
    elapsed = now - started_;
    started_ = now;
  }
  const std::string window =
      absl::FormatDuration(std::max(absl::Seconds(1), absl::Ceil(elapsed, absl::Seconds(1))));
  for (const auto& [key, n] : more) {
    if (n == 0) continue;
    const auto& [peer, principal, reason] = key;
    Refusal fields{peer, principal, reason, "", "", ""};
    sink_(absl::StrCat("audit: ", n, " more refusals (", reason, ") from ", peer, " by ", principal,
                       " in the last ", window),
          fields);
  }
  for (const auto& [reason, n] : overflow) {
    Refusal fields{"", "", reason, "", "", ""};
    sink_(absl::StrCat("audit: ", n, " refusals (", reason, ") from callers past the first kept (",
                       kMaxKeys, " in all, ", kMaxAnonymousKeys, " unknown) in the last ", window),
          fields);
  }
}

}  // namespace farcall
