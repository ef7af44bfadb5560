#include "device_agents/idle_watchdog.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace farcall::agent {

void WatchedCall::ExpireIfIdle(absl::Time now, const IdleLimits& limits, bool contended) {
  Wait waited;
  absl::Duration limit = limits.idle;
  const char* flag = "--stream_idle_timeout";
  const char* why = "";
  {
    absl::MutexLock l(&mu_);
    if (expired_ || waiting_ == Wait::kNone) return;
    if (contended && holds_budget_ && limits.stall > absl::ZeroDuration() &&
        (limit == absl::ZeroDuration() || limits.stall < limit)) {
      limit = limits.stall;
      flag = "--stream_stall_timeout";
      why = " while other calls waited for its memory";
    }
    if (limit == absl::ZeroDuration() || now - since_ < limit) return;
    expired_ = true;
    waited = waiting_;
  }
  EndIdle(waited,
          absl::DeadlineExceededError(absl::StrCat(
              "the caller ", waited == Wait::kSend ? "sent nothing" : "read no results", " for ",
              absl::FormatDuration(limit), why, " (", flag, "); the call was ended.")));
}

void WatchedCall::AwaitClient(Wait w) {
  absl::MutexLock l(&mu_);
  waiting_ = w;
  since_ = absl::Now();
}

bool WatchedCall::Resume() {
  absl::MutexLock l(&mu_);
  waiting_ = Wait::kNone;
  return !expired_;
}

void WatchedCall::SetHoldsBudget(bool holds) {
  absl::MutexLock l(&mu_);
  holds_budget_ = holds;
}

namespace {

absl::Duration Tick(const IdleLimits& limits) {
  absl::Duration shortest = limits.idle;
  if (limits.stall > absl::ZeroDuration() &&
      (shortest == absl::ZeroDuration() || limits.stall < shortest)) {
    shortest = limits.stall;
  }
  return std::clamp(shortest / 4, absl::Milliseconds(10), absl::Seconds(1));
}

}  // namespace

IdleWatchdog::IdleWatchdog(IdleLimits limits, std::function<bool()> contended)
    : limits_(limits), contended_(std::move(contended)), tick_(Tick(limits)) {
  thread_ = std::thread([this] { Loop(); });
}

IdleWatchdog::~IdleWatchdog() {
  {
    absl::MutexLock l(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

void IdleWatchdog::Add(WatchedCall* call) {
  absl::MutexLock l(&mu_);
  calls_.insert(call);
}

void IdleWatchdog::Remove(WatchedCall* call) {
  absl::MutexLock l(&mu_);
  calls_.erase(call);
}

void IdleWatchdog::Loop() {
  for (;;) {
    std::vector<WatchedCall*> calls;
    {
      absl::MutexLock l(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&stopping_), tick_);
      if (stopping_) return;
      for (WatchedCall* c : calls_) {
        c->Ref();  // kept alive past its OnDone until asked
        calls.push_back(c);
      }
    }
    const absl::Time now = absl::Now();
    const bool contended = contended_();
    for (WatchedCall* c : calls) {
      c->ExpireIfIdle(now, limits_, contended);
      c->Unref();
    }
  }
}

}  // namespace farcall::agent
