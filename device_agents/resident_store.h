// Resident arrays: arrays a client leaves on this agent between calls, in
// the device's own memory, named by unguessable handles
// (core/resident_handle.h).
//
// A call names residents in its header: as args (no bytes travel; a result
// aliased to one updates it in place), as results to keep (the agent keeps
// the result's memory instead of sending it), and as ones to free after it
// ran (Client::Delete). Client::Put is a `copy` whose result, aliased to its
// arg, is kept; Client::Get is a `copy` of a resident arg.
//
// Each resident belongs to the principal that made it (core/tokens.h): for
// any other it does not exist, with the same NOT_FOUND as an unknown handle.
// Its bytes stay in the agent's in-flight budget (Admission::Keep) and count
// against --resident_bytes (all residents) and
// --resident_bytes_per_principal. It lives until deleted, or for its TTL
// after its last use (each call that names it renews it); a reaper frees
// expired ones once a second.
//
// Calls that name a resident run one at a time on it (UseLock), so that a
// handler never reads a resident another handler is writing.
//
// Thread safety: all methods are thread-safe.
#ifndef FARCALL_DEVICE_AGENTS_RESIDENT_STORE_H_
#define FARCALL_DEVICE_AGENTS_RESIDENT_STORE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/tensor_spec.h"
#include "device_agents/admission.h"
#include "device_agents/device.h"

namespace farcall::agent {

struct ResidentArray {
  std::string handle;
  std::string principal;
  TensorSpec spec;
  int64_t size = 0;
  std::shared_ptr<DeviceMemory> memory;
  Device* device = nullptr;  // whose memory it is
  absl::Duration ttl;
  // Held while a handler runs with it (AgentCall::Run).
  absl::Mutex use;
};

class ResidentStore {
 public:
  struct Options {
    int64_t max_bytes = 0;                        // all residents together (--resident_bytes)
    int64_t max_bytes_per_principal = 0;          // 0: max_bytes (--resident_bytes_per_principal)
    int64_t max_count = 65536;                    // residents at once (--resident_max_count)
    absl::Duration default_ttl = absl::Hours(1);  // --resident_ttl
    absl::Duration max_ttl = absl::Hours(24 * 7);
    absl::Duration reap_every = absl::Seconds(1);
    std::function<absl::Time()> clock = [] { return absl::Now(); };  // tests set their own
  };
  // `admission` is the agent's budget, which kept bytes stay in.
  ResidentStore(Options options, Admission* admission);
  ~ResidentStore();
  ResidentStore(const ResidentStore&) = delete;
  ResidentStore& operator=(const ResidentStore&) = delete;

  const Options& options() const { return options_; }
  // This run's BOOT (core/resident_handle.h).
  const std::string& boot() const { return boot_; }

  // The resident `handle` names, for `principal`, on agent `agent_id`; its
  // TTL starts again. `where` names it in errors ("args[1]"):
  //   NOT_FOUND, the same message, for an unknown handle and another
  //     principal's;
  //   NOT_FOUND marked kResidentLost for a handle from an earlier run of
  //     this agent;
  //   FAILED_PRECONDITION for a handle of another agent;
  //   INVALID_ARGUMENT for text that is no handle.
  absl::StatusOr<std::shared_ptr<ResidentArray>> Find(const std::string& handle,
                                                      const std::string& principal,
                                                      absl::string_view agent_id,
                                                      absl::string_view where);
  // Room for `bytes` more of `principal`'s residents, held until Keep or
  // Unreserve: RESOURCE_EXHAUSTED naming the limit it would pass. Without
  // --resident_bytes_per_principal, a principal whose tenant has an
  // in-flight quota (`tenant_cap`, named by `tenant_cap_name`) may keep at
  // most that much: residents leave that quota, so without this a tenant
  // held to it could take half the agent's budget from the others.
  absl::Status Reserve(const std::string& principal, int64_t bytes, int count,
                       int64_t tenant_cap = 0, absl::string_view tenant_cap_name = "");
  void Unreserve(const std::string& principal, int64_t bytes, int count);
  // Makes `memory` a resident of `principal` out of its reservation; the
  // bytes, which the call held under `tenant` in the budget, stay there for
  // the resident. Returns its handle.
  std::string Keep(const std::string& principal, const std::string& tenant, TensorSpec spec,
                   int64_t size, std::shared_ptr<DeviceMemory> memory, Device* device,
                   absl::Duration ttl, absl::string_view agent_id);
  // Frees a resident now (found by Find): its bytes go back to the budget
  // at once; its memory once no call in flight uses it.
  void Release(const std::string& handle);
  // The TTL a call asks for (0: the default), or INVALID_ARGUMENT.
  absl::StatusOr<absl::Duration> TtlFor(int64_t ttl_ms) const;

  int64_t bytes() const;
  int64_t count() const;
  // Frees those whose TTL ran out by the clock's now (the reaper calls it).
  void Expire();

 private:
  struct Entry {
    std::shared_ptr<ResidentArray> array;
    absl::Time expires;
  };
  struct Owner {
    int64_t bytes = 0;  // kept and reserved
    int count = 0;
  };
  // Drops an entry (under mu_); the bytes to give back to the budget.
  int64_t Drop(absl::flat_hash_map<std::string, Entry>::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Publish() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Reap();

  const Options options_;
  Admission* const admission_;
  const std::string boot_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, Owner> owners_ ABSL_GUARDED_BY(mu_);
  int64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;  // kept and reserved, all principals
  int64_t count_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t kept_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread reaper_;
};

}  // namespace farcall::agent

#endif  // FARCALL_DEVICE_AGENTS_RESIDENT_STORE_H_
