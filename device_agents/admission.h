// Admission of calls against the agent's byte budget for calls in flight
// (--max_inflight_bytes), shared fairly between tenants (the principals
// calls run as, core/tokens.h; "" is every call without one):
//   - A call that fits is admitted at once, unless others wait for bytes.
//   - One that does not fit waits in its tenant's queue. When bytes come
//     free, the tenants' queues are served in turn, weighted by bytes:
//     start-time fair queuing, where each call's tag is where its tenant's
//     earlier calls end (or the queue's clock, for a tenant that had
//     nothing waiting), and the smallest tag goes first. So a tenant's next
//     call waits behind at most one call of each other tenant, however many
//     that tenant queued; within a tenant, first come, first served.
//   - The head the tags pick is not overtaken by a smaller call that would
//     fit, so that large calls are not starved.
//   - A tenant may have a quota of bytes at once (--tenant_max_bytes, or
//     its tokens-file line). Its calls past it wait in its queue without
//     holding up the other tenants' (a tenant holding nothing is never
//     past it: its call was checked against the quota when it came). The
//     quota is the tenant's weight in the turns too: a tenant with half
//     the quota of another gets half its bytes while both wait; one
//     without a quota weighs the whole budget.
//
// Thread safety: all methods are thread-safe. Resume callbacks run on the
// thread that released the bytes, outside the lock.
#ifndef FARCALL_DEVICE_AGENTS_ADMISSION_H_
#define FARCALL_DEVICE_AGENTS_ADMISSION_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"

namespace farcall::agent {

// Who asks for bytes: its tenant, and the most bytes that tenant may hold
// at once (0: no quota but the budget).
struct AdmissionTenant {
  std::string name;
  int64_t max_bytes = 0;
};

class Admission {
 public:
  using Tenant = AdmissionTenant;

  explicit Admission(int64_t budget) : budget_(budget) {}

  int64_t budget() const { return budget_; }
  int64_t held() const;
  int64_t held(const std::string& tenant) const;
  // Calls waiting, and of those the ones that wait for the budget (not for
  // their own tenant's quota): only those make the budget contended.
  size_t waiting() const;
  size_t waiting_for_budget() const;

  // Reserves `bytes` if they fit now, in the budget and the tenant's
  // quota, and nobody waits for the budget.
  bool TryAcquire(int64_t bytes, const Tenant& tenant = {});
  // Queues a call whose `bytes` did not fit; once they do and its turn
  // comes, they are reserved for it and `resume` runs. Returns a ticket for
  // Cancel().
  uint64_t Wait(int64_t bytes, std::function<void()> resume, const Tenant& tenant = {});
  // Takes a waiting call out of its queue. True if it was still waiting
  // (its resume will never run); false if it was already admitted.
  bool Cancel(uint64_t ticket);
  // Gives back bytes `tenant` held and admits the waiters whose turn it is.
  void Release(int64_t bytes, const std::string& tenant = "");
  // Bytes `tenant` held that now stay for a resident array
  // (resident_store.h): they leave its quota but stay in the budget, until
  // ReleaseKept gives them back.
  void Keep(int64_t bytes, const std::string& tenant = "");
  void ReleaseKept(int64_t bytes);

 private:
  struct Waiter {
    uint64_t ticket;
    int64_t bytes;
    double tag;  // its start tag: where its tenant's earlier calls end
    std::function<void()> resume;
  };
  struct Queue {
    int64_t max_bytes = 0;
    int64_t held = 0;
    double finish = 0;  // the tag after its last call
    std::deque<Waiter> waiters;
  };
  // Tags a call of `bytes` in `q`: returns its start tag.
  double Take(Queue& q, int64_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether the head of `q` waits for its own tenant's quota.
  static bool OverQuota(const Queue& q);
  // Admits the heads whose turn it is while they fit; their resumes, to
  // run outside the lock.
  std::vector<std::function<void()>> Dispatch() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Forgets a tenant that holds and waits for nothing.
  void Forget(const std::string& name) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int64_t budget_;
  mutable absl::Mutex mu_;
  int64_t held_ ABSL_GUARDED_BY(mu_) = 0;
  size_t waiting_ ABSL_GUARDED_BY(mu_) = 0;
  double clock_ ABSL_GUARDED_BY(mu_) = 0;  // the last admitted call's start tag
  uint64_t next_ticket_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<std::string, Queue> tenants_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, std::string> waiting_tenant_ ABSL_GUARDED_BY(mu_);
};

// One call's wait for the budget, which the call may withdraw (it was
// cancelled) at any moment, even before the wait is queued: exactly one of
// `go` (admitted) and `withdrawn` runs, unless the call was admitted at once
// (then `go` ran and a withdrawal does nothing).
class BudgetWait {
 public:
  // Runs `go` now if the bytes fit, else once they do, through `resume`
  // (which hands it to a thread of the caller's: the bytes are freed by
  // whichever thread ends another call), or `withdrawn` if Withdraw() comes
  // first.
  using Executor = std::function<void(std::function<void()>)>;
  void Admit(Admission& admission, int64_t bytes, const Admission::Tenant& tenant,
             std::function<void()> go, std::function<void()> withdrawn, Executor resume);
  // The call no longer wants the bytes.
  void Withdraw(Admission& admission);

 private:
  void Cancel(Admission& admission, uint64_t ticket);

  absl::Mutex mu_;
  uint64_t ticket_ ABSL_GUARDED_BY(mu_) = 0;
  bool withdraw_asked_ ABSL_GUARDED_BY(mu_) = false;
  std::function<void()> withdrawn_ ABSL_GUARDED_BY(mu_);
};

}  // namespace farcall::agent

#endif  // FARCALL_DEVICE_AGENTS_ADMISSION_H_
