#include "device_agents/admission.h"

#include <utility>
#include <vector>

namespace farcall::agent {

int64_t Admission::held() const {
  absl::MutexLock l(&mu_);
  return held_;
}

size_t Admission::waiting() const {
  absl::MutexLock l(&mu_);
  return queue_.size();
}

bool Admission::TryAcquire(int64_t bytes) {
  absl::MutexLock l(&mu_);
  // Nobody overtakes a waiting call, so that large calls are not starved.
  if (!queue_.empty() || held_ + bytes > budget_) return false;
  held_ += bytes;
  return true;
}

uint64_t Admission::Wait(int64_t bytes, std::function<void()> resume) {
  std::function<void()> now;
  uint64_t ticket;
  {
    absl::MutexLock l(&mu_);
    ticket = next_ticket_++;
    if (queue_.empty() && held_ + bytes <= budget_) {
      // Bytes came free since TryAcquire: no need to queue.
      held_ += bytes;
      now = std::move(resume);
    } else {
      queue_.push_back(Waiter{ticket, bytes, std::move(resume)});
    }
  }
  if (now) now();
  return ticket;
}

bool Admission::Cancel(uint64_t ticket) {
  std::vector<std::function<void()>> admitted;
  bool found = false;
  {
    absl::MutexLock l(&mu_);
    for (auto it = queue_.begin(); it != queue_.end(); ++it) {
      if (it->ticket == ticket) {
        queue_.erase(it);
        found = true;
        break;
      }
    }
    // The head may have been blocking others that fit now.
    while (!queue_.empty() && held_ + queue_.front().bytes <= budget_) {
      held_ += queue_.front().bytes;
      admitted.push_back(std::move(queue_.front().resume));
      queue_.pop_front();
    }
  }
  for (auto& r : admitted) r();
  return found;
}

void Admission::Release(int64_t bytes) {
  std::vector<std::function<void()>> admitted;
  {
    absl::MutexLock l(&mu_);
    held_ -= bytes;
    while (!queue_.empty() && held_ + queue_.front().bytes <= budget_) {
      held_ += queue_.front().bytes;
      admitted.push_back(std::move(queue_.front().resume));
      queue_.pop_front();
    }
  }
  for (auto& r : admitted) r();
}

void BudgetWait::Admit(Admission& admission, int64_t bytes, std::function<void()> go,
                       std::function<void()> withdrawn, Executor resume) {
  if (bytes == 0 || admission.TryAcquire(bytes)) return go();
  {
    absl::MutexLock l(&mu_);
    withdrawn_ = std::move(withdrawn);
  }
  const uint64_t t = admission.Wait(
      bytes, [go = std::move(go), resume = std::move(resume)]() mutable { resume(std::move(go)); });
  bool asked;
  {
    absl::MutexLock l(&mu_);
    ticket_ = t;
    asked = withdraw_asked_;
  }
  // Withdrawn while the wait was being queued: take it out now.
  if (asked) Cancel(admission, t);
}

void BudgetWait::Withdraw(Admission& admission) {
  uint64_t t;
  {
    absl::MutexLock l(&mu_);
    withdraw_asked_ = true;
    t = ticket_;
  }
  if (t != 0) Cancel(admission, t);
}

void BudgetWait::Cancel(Admission& admission, uint64_t ticket) {
  if (!admission.Cancel(ticket)) return;  // admitted: `go` ran, or runs
  std::function<void()> withdrawn;
  {
    absl::MutexLock l(&mu_);
    withdrawn = std::move(withdrawn_);
    withdrawn_ = nullptr;
  }
  if (withdrawn) withdrawn();
}

}  // namespace farcall::agent
