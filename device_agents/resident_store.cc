#include "device_agents/resident_store.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/resident_handle.h"
#include "device_agents/agent_metrics.h"

namespace farcall::agent {

ResidentStore::ResidentStore(Options options, Admission* admission)
    : options_(std::move(options)), admission_(admission), boot_(NewResidentBoot()) {
  reaper_ = std::thread([this] { Reap(); });
}

ResidentStore::~ResidentStore() {
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
  }
  reaper_.join();
  absl::MutexLock l(&mu_);
  int64_t freed = 0;
  while (!entries_.empty()) freed += Drop(entries_.begin());
  if (freed > 0 && admission_ != nullptr) admission_->ReleaseKept(freed);
}

void ResidentStore::Reap() {
  absl::MutexLock l(&mu_);
  while (!stop_) {
    mu_.AwaitWithTimeout(absl::Condition(&stop_), options_.reap_every);
    if (stop_) break;
    mu_.Unlock();
    Expire();
    mu_.Lock();
  }
}

absl::StatusOr<absl::Duration> ResidentStore::TtlFor(int64_t ttl_ms) const {
  if (ttl_ms < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("resident_ttl_ms is ", ttl_ms, "; give 0 (the agent's default) or more."));
  }
  if (ttl_ms == 0) return options_.default_ttl;
  const absl::Duration ttl = absl::Milliseconds(ttl_ms);
  if (ttl > options_.max_ttl) {
    return absl::InvalidArgumentError(absl::StrCat("resident_ttl_ms is ", ttl_ms,
                                                   ", over the longest a resident may stay, ",
                                                   absl::FormatDuration(options_.max_ttl), "."));
  }
  return ttl;
}

absl::StatusOr<std::shared_ptr<ResidentArray>> ResidentStore::Find(const std::string& handle,
                                                                   const std::string& principal,
                                                                   absl::string_view agent_id,
                                                                   absl::string_view where) {
  absl::StatusOr<ResidentHandle> h = ParseResidentHandle(handle, where);
  if (!h.ok()) return h.status();
  if (h->agent_id != agent_id) {
    return absl::FailedPreconditionError(absl::StrCat(
        where, " names resident ", ShortHandle(handle), ", held by agent '", h->agent_id,
        "', not this one ('", agent_id, "'): send calls that name it to its agent."));
  }
  if (h->boot != boot_) {
    return ResidentLostError(handle, absl::StrCat("agent '", agent_id, "' restarted since"));
  }
  absl::MutexLock l(&mu_);
  auto it = entries_.find(handle);
  // Another principal's resident is as unknown as one never made.
  if (it == entries_.end() || it->second.array->principal != principal) {
    return absl::NotFoundError(absl::StrCat(where, " names resident ", ShortHandle(handle),
                                            ", which this agent does not hold for this caller "
                                            "(deleted, expired, or never made)."));
  }
  it->second.expires = options_.clock() + it->second.array->ttl;
  return it->second.array;
}

absl::Status ResidentStore::Reserve(const std::string& principal, int64_t bytes, int count,
                                    int64_t tenant_cap, absl::string_view tenant_cap_name) {
  absl::MutexLock l(&mu_);
  Owner& o = owners_[principal];
  int64_t per_principal = options_.max_bytes;
  std::string cap_name = "--resident_bytes";
  if (options_.max_bytes_per_principal > 0) {
    per_principal = options_.max_bytes_per_principal;
    cap_name = "--resident_bytes_per_principal";
  } else if (tenant_cap > 0 && tenant_cap < options_.max_bytes) {
    per_principal = tenant_cap;
    cap_name = std::string(tenant_cap_name);
  }
  absl::Status s;
  if (count_ + count > options_.max_count) {
    s = absl::ResourceExhaustedError(absl::StrCat(
        "this agent holds ", count_, " resident arrays, and the call would keep ", count,
        " more, over --resident_max_count=", options_.max_count, ": delete some first."));
  } else if (o.bytes + bytes > per_principal) {
    s = absl::ResourceExhaustedError(absl::StrCat(
        "this caller's resident arrays hold ", o.bytes, " bytes, and the call would keep ", bytes,
        " more, over ", cap_name, "=", per_principal, ": delete some first."));
  } else if (bytes_ + bytes > options_.max_bytes) {
    s = absl::ResourceExhaustedError(absl::StrCat(
        "this agent's resident arrays hold ", bytes_, " bytes, and the call would keep ", bytes,
        " more, over --resident_bytes=", options_.max_bytes, "."));
  }
  if (!s.ok()) {
    if (o.bytes == 0 && o.count == 0) owners_.erase(principal);
    return s;
  }
  o.bytes += bytes;
  o.count += count;
  bytes_ += bytes;
  count_ += count;
  return absl::OkStatus();
}

void ResidentStore::Unreserve(const std::string& principal, int64_t bytes, int count) {
  absl::MutexLock l(&mu_);
  auto it = owners_.find(principal);
  if (it == owners_.end()) return;
  it->second.bytes -= bytes;
  it->second.count -= count;
  bytes_ -= bytes;
  count_ -= count;
  if (it->second.bytes <= 0 && it->second.count <= 0) owners_.erase(it);
}

std::string ResidentStore::Keep(const std::string& principal, const std::string& tenant,
                                TensorSpec spec, int64_t size, std::shared_ptr<DeviceMemory> memory,
                                Device* device, absl::Duration ttl, absl::string_view agent_id) {
  auto a = std::make_shared<ResidentArray>();
  a->handle = NewResidentHandle(boot_, agent_id);
  a->principal = principal;
  a->spec = std::move(spec);
  a->size = size;
  a->memory = std::move(memory);
  a->device = device;
  a->ttl = ttl;
  std::string handle = a->handle;
  if (admission_ != nullptr) admission_->Keep(size, tenant);
  absl::MutexLock l(&mu_);
  kept_bytes_ += size;
  entries_[handle] = Entry{std::move(a), options_.clock() + ttl};
  Publish();
  return handle;
}

int64_t ResidentStore::Drop(absl::flat_hash_map<std::string, Entry>::iterator it) {
  const int64_t size = it->second.array->size;
  auto o = owners_.find(it->second.array->principal);
  if (o != owners_.end()) {
    o->second.bytes -= size;
    o->second.count -= 1;
    if (o->second.bytes <= 0 && o->second.count <= 0) owners_.erase(o);
  }
  bytes_ -= size;
  count_ -= 1;
  kept_bytes_ -= size;
  entries_.erase(it);
  Publish();
  return size;
}

void ResidentStore::Release(const std::string& handle) {
  int64_t freed = 0;
  {
    absl::MutexLock l(&mu_);
    auto it = entries_.find(handle);
    if (it == entries_.end()) return;
    freed = Drop(it);
  }
  if (admission_ != nullptr) admission_->ReleaseKept(freed);
}

void ResidentStore::Expire() {
  const absl::Time now = options_.clock();
  int64_t freed = 0;
  int64_t expired = 0;
  {
    absl::MutexLock l(&mu_);
    for (auto it = entries_.begin(); it != entries_.end();) {
      auto next = std::next(it);
      if (it->second.expires <= now) {
        freed += Drop(it);
        ++expired;
      }
      it = next;
    }
  }
  if (expired > 0) Metrics().residents_expired.With({}).Increment(static_cast<double>(expired));
  if (freed > 0 && admission_ != nullptr) admission_->ReleaseKept(freed);
}

void ResidentStore::Publish() const {
  Metrics().resident_bytes.With({}).Set(static_cast<double>(kept_bytes_));
  Metrics().residents.With({}).Set(static_cast<double>(entries_.size()));
}

int64_t ResidentStore::bytes() const {
  absl::MutexLock l(&mu_);
  return kept_bytes_;
}

int64_t ResidentStore::count() const {
  absl::MutexLock l(&mu_);
  return static_cast<int64_t>(entries_.size());
}

}  // namespace farcall::agent
