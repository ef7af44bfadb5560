#include "device_agents/admission.h"

#include <algorithm>
#include <utility>
#include <vector>

namespace farcall::agent {

int64_t Admission::held() const {
  absl::MutexLock l(&mu_);
  return held_;
}

int64_t Admission::held(const std::string& tenant) const {
  absl::MutexLock l(&mu_);
  auto it = tenants_.find(tenant);
  return it == tenants_.end() ? 0 : it->second.held;
}

size_t Admission::waiting() const {
  absl::MutexLock l(&mu_);
  return waiting_;
}

size_t Admission::waiting_for_budget() const {
  absl::MutexLock l(&mu_);
  size_t n = 0;
  for (const auto& [name, q] : tenants_) {
    if (!q.waiters.empty() && !OverQuota(q)) n += q.waiters.size();
  }
  return n;
}

bool Admission::OverQuota(const Queue& q) {
  // A tenant that holds nothing is never over its quota: the call was
  // checked against the quota it came with (Validate), which a later call
  // of the tenant may have changed (another path's quota, a reload).
  return q.max_bytes > 0 && q.held > 0 && q.held + q.waiters.front().bytes > q.max_bytes;
}

double Admission::Take(Queue& q, int64_t bytes) {
  // A tenant's calls cost their bytes over its weight: its quota, or the
  // whole budget for a tenant with none.
  const double weight =
      q.max_bytes > 0 ? static_cast<double>(q.max_bytes) : static_cast<double>(budget_);
  const double start = std::max(q.finish, clock_);
  q.finish = start + static_cast<double>(bytes) * static_cast<double>(budget_) / weight;
  return start;
}

bool Admission::TryAcquire(int64_t bytes, const Tenant& tenant) {
  absl::MutexLock l(&mu_);
  if (held_ + bytes > budget_) return false;
  if (tenant.max_bytes > 0) {
    auto it = tenants_.find(tenant.name);
    const int64_t has = it == tenants_.end() ? 0 : it->second.held;
    if (has > 0 && has + bytes > tenant.max_bytes) return false;
  }
  // Nobody overtakes a call waiting for the budget, so that large calls
  // are not starved; one waiting for its own quota holds nobody up.
  for (const auto& [name, q] : tenants_) {
    if (!q.waiters.empty() && !OverQuota(q)) return false;
  }
  Queue& q = tenants_[tenant.name];
  q.max_bytes = tenant.max_bytes;
  if (!q.waiters.empty()) return false;  // its own earlier calls go first
  clock_ = std::max(clock_, Take(q, bytes));
  held_ += bytes;
  q.held += bytes;
  return true;
}

uint64_t Admission::Wait(int64_t bytes, std::function<void()> resume, const Tenant& tenant) {
  std::vector<std::function<void()>> admitted;
  uint64_t ticket;
  {
    absl::MutexLock l(&mu_);
    ticket = next_ticket_++;
    Queue& q = tenants_[tenant.name];
    q.max_bytes = tenant.max_bytes;
    const double tag = Take(q, bytes);
    q.waiters.push_back(Waiter{ticket, bytes, tag, std::move(resume)});
    waiting_tenant_[ticket] = tenant.name;
    ++waiting_;
    // Bytes may have come free since TryAcquire, and it may be its turn.
    admitted = Dispatch();
  }
  for (auto& r : admitted) r();
  return ticket;
}

std::vector<std::function<void()>> Admission::Dispatch() {
  std::vector<std::function<void()>> admitted;
  for (;;) {
    Queue* next = nullptr;
    for (auto& [name, q] : tenants_) {
      if (q.waiters.empty() || OverQuota(q)) continue;
      const Waiter& w = q.waiters.front();
      if (next == nullptr || w.tag < next->waiters.front().tag ||
          (w.tag == next->waiters.front().tag && w.ticket < next->waiters.front().ticket)) {
        next = &q;
      }
    }
    // The head whose turn it is waits for the budget: nobody overtakes it.
    if (next == nullptr || held_ + next->waiters.front().bytes > budget_) break;
    Waiter w = std::move(next->waiters.front());
    next->waiters.pop_front();
    held_ += w.bytes;
    next->held += w.bytes;
    clock_ = std::max(clock_, w.tag);
    --waiting_;
    waiting_tenant_.erase(w.ticket);
    admitted.push_back(std::move(w.resume));
  }
  return admitted;
}

void Admission::Forget(const std::string& name) {
  auto it = tenants_.find(name);
  if (it == tenants_.end() || it->second.held > 0 || !it->second.waiters.empty()) return;
  // Its tag restarts at the clock when it comes back: a tenant that was
  // away keeps no credit, and the map holds only tenants with bytes.
  tenants_.erase(it);
  // Nobody holds or waits: the tags start again from zero, so that they
  // never grow past what a double counts exactly.
  if (tenants_.empty()) clock_ = 0;
}

bool Admission::Cancel(uint64_t ticket) {
  std::vector<std::function<void()>> admitted;
  bool found = false;
  {
    absl::MutexLock l(&mu_);
    auto t = waiting_tenant_.find(ticket);
    if (t != waiting_tenant_.end()) {
      const std::string name = t->second;
      waiting_tenant_.erase(t);
      std::deque<Waiter>& waiters = tenants_[name].waiters;
      for (auto it = waiters.begin(); it != waiters.end(); ++it) {
        if (it->ticket == ticket) {
          waiters.erase(it);
          found = true;
          --waiting_;
          break;
        }
      }
      Forget(name);
    }
    // The call may have been holding up others that go now.
    admitted = Dispatch();
  }
  for (auto& r : admitted) r();
  return found;
}

void Admission::Release(int64_t bytes, const std::string& tenant) {
  std::vector<std::function<void()>> admitted;
  {
    absl::MutexLock l(&mu_);
    held_ -= bytes;
    auto it = tenants_.find(tenant);
    if (it != tenants_.end()) it->second.held -= bytes;
    admitted = Dispatch();
    Forget(tenant);
  }
  for (auto& r : admitted) r();
}

void Admission::Keep(int64_t bytes, const std::string& tenant) {
  std::vector<std::function<void()>> admitted;
  {
    absl::MutexLock l(&mu_);
    auto it = tenants_.find(tenant);
    if (it != tenants_.end()) it->second.held -= bytes;
    // The tenant's quota has room again: its own waiters may go.
    admitted = Dispatch();
    Forget(tenant);
  }
  for (auto& r : admitted) r();
}

void Admission::ReleaseKept(int64_t bytes) {
  std::vector<std::function<void()>> admitted;
  {
    absl::MutexLock l(&mu_);
    held_ -= bytes;
    admitted = Dispatch();
  }
  for (auto& r : admitted) r();
}

void BudgetWait::Admit(Admission& admission, int64_t bytes, const Admission::Tenant& tenant,
                       std::function<void()> go, std::function<void()> withdrawn, Executor resume) {
  if (bytes == 0 || admission.TryAcquire(bytes, tenant)) return go();
  {
    absl::MutexLock l(&mu_);
    withdrawn_ = std::move(withdrawn);
  }
  const uint64_t t = admission.Wait(
      bytes, [go = std::move(go), resume = std::move(resume)]() mutable { resume(std::move(go)); },
      tenant);
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
