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

}  // namespace farcall::agent
