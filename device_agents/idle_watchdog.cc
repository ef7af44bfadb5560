#include "device_agents/idle_watchdog.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace farcall::agent {

absl::Status MaxCallTimeError(absl::Duration limit) {
  return absl::DeadlineExceededError(absl::StrCat("the call ran past this agent's limit of ",
                                                  absl::FormatDuration(limit),
                                                  " per call (--max_call_seconds)."));
}

void WatchedCall::ExpireIfIdle(absl::Time now, const IdleLimits& limits, bool contended) {
  Wait waited;
  absl::Status error;
  {
    absl::MutexLock l(&mu_);
    if (expired_ || waiting_ == Wait::kNone) return;
    waited = waiting_;
    // The rate is judged only over time others wait for this call's memory.
    const bool judged = contended && holds_budget_ && moving_ && limits.min_bytes_per_second > 0 &&
                        limits.stall > absl::ZeroDuration();
    if (!judged) {
      window_start_ = now;
      window_moved_ = moved_;
    }
    absl::Duration limit = limits.idle;
    const char* flag = "--stream_idle_timeout";
    const char* why = "";
    if (contended && holds_budget_ && limits.stall > absl::ZeroDuration() &&
        (limit == absl::ZeroDuration() || limits.stall < limit)) {
      limit = limits.stall;
      flag = "--stream_stall_timeout";
      why = " while other calls waited for its memory";
    }
    if (now - started_ >= limits.max_call) {
      error = MaxCallTimeError(limits.max_call);
    } else if (waited == Wait::kBudget) {
      return;  // waiting for memory is not the client's doing
    } else if (limit != absl::ZeroDuration() && now - since_ >= limit) {
      error = absl::DeadlineExceededError(absl::StrCat(
          "the caller ", waited == Wait::kSend ? "sent nothing" : "read no results", " for ",
          absl::FormatDuration(limit), why, " (", flag, "); the call was ended."));
    } else if (judged && now - window_start_ >= limits.stall) {
      // Not silent, but too slow: a byte now and then holds memory all the
      // same.
      const double seconds = absl::ToDoubleSeconds(now - window_start_);
      const int64_t moved = moved_ - window_moved_;
      if (static_cast<double>(moved) >= limits.min_bytes_per_second * seconds) {
        window_start_ = now;
        window_moved_ = moved_;
        return;
      }
      error = absl::DeadlineExceededError(absl::StrCat(
          "the caller moved ", moved, " bytes in ",
          absl::FormatDuration(absl::Trunc(now - window_start_, absl::Milliseconds(1))),
          " while other calls waited for its memory, under the ",
          static_cast<int64_t>(limits.min_bytes_per_second),
          " bytes per second asked of it (--min_stream_bytes_per_second); the call was ended."));
    } else {
      return;
    }
    expired_ = true;
    ended_with_ = error;
  }
  if (waited == Wait::kBudget) return EndQueued(error);
  EndIdle(waited, error);
}

bool WatchedCall::EndWaiting(const absl::Status& error) {
  Wait waited;
  {
    absl::MutexLock l(&mu_);
    if (expired_ || waiting_ == Wait::kNone || waiting_ == Wait::kRead) return false;
    waited = waiting_;
    expired_ = true;
    ended_with_ = error;
  }
  if (waited == Wait::kBudget) {
    EndQueued(error);
  } else {
    EndIdle(waited, error);
  }
  return true;
}

absl::Status WatchedCall::EndedWith() {
  absl::MutexLock l(&mu_);
  return ended_with_;
}

void WatchedCall::AwaitClient(Wait w, absl::Time now) {
  absl::MutexLock l(&mu_);
  waiting_ = w;
  since_ = now;
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

void WatchedCall::SetMoving(bool moving) {
  absl::MutexLock l(&mu_);
  if (moving && !moving_) {
    window_start_ = absl::Now();
    window_moved_ = moved_;
  }
  moving_ = moving;
}

void WatchedCall::Progress(int64_t bytes) {
  absl::MutexLock l(&mu_);
  moved_ += bytes;
}

namespace {

absl::Duration Tick(const IdleLimits& limits) {
  absl::Duration shortest = limits.idle;
  for (absl::Duration d : {limits.stall, limits.max_call}) {
    if (d > absl::ZeroDuration() && (shortest == absl::ZeroDuration() || d < shortest)) {
      shortest = d;
    }
  }
  // A fine tick: a call past its limit is ended within a quarter second of
  // it, so that a stalled or dripping call costs the calls waiting behind it
  // the stall window and a quarter second at most.
  return std::clamp(shortest / 20, absl::Milliseconds(10), absl::Milliseconds(250));
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
