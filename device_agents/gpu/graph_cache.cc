#include "device_agents/gpu/graph_cache.h"

#include <algorithm>
#include <functional>
#include <utility>
#include <vector>

#include "absl/base/casts.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "device_agents/agent_metrics.h"

namespace farcall::agent::FARCALL_GPU_NS {
namespace {

void AppendBuffer(std::string& key, const FarcallBuffer& b) {
  absl::StrAppend(&key, b.dtype, "[");
  for (int64_t i = 0; i < b.rank; ++i) absl::StrAppend(&key, b.dims[i], ",");
  absl::StrAppend(&key, "]a", b.aliased_arg, ";");
}

}  // namespace

std::string GraphSignature(const RegisteredHandler& handler, const HandlerInvocation& inv) {
  std::string key = absl::StrCat(handler.name, "@", handler.source, "|");
  for (const FarcallBuffer& b : inv.args) AppendBuffer(key, b);
  key += "|";
  for (const FarcallBuffer& b : inv.results) AppendBuffer(key, b);
  key += "|";
  // Attributes are baked into the captured launches, so they are part of
  // the signature; sorted, since their order on the wire is not fixed.
  std::vector<std::string> attrs;
  for (const FarcallAttribute& a : inv.attrs) {
    std::string s(a.name, a.name_size);
    switch (a.type) {
      case FARCALL_ATTR_I64:
        absl::StrAppend(&s, "=i", a.i64);
        break;
      case FARCALL_ATTR_F64:
        // The exact bits: 1.0000001 and 1.0000002 must not share a graph.
        absl::StrAppend(&s, "=f", absl::Hex(absl::bit_cast<uint64_t>(a.f64)));
        break;
      case FARCALL_ATTR_BOOL:
        absl::StrAppend(&s, "=b", a.b);
        break;
      default:
        absl::StrAppend(&s, "=s", a.str_size, ":", absl::string_view(a.str, a.str_size));
        break;
    }
    attrs.push_back(std::move(s));
  }
  std::sort(attrs.begin(), attrs.end());
  for (const std::string& a : attrs) absl::StrAppend(&key, a.size(), ":", a);
  return key;
}

// Runs when the last call holding the entry let go of it, so nothing else
// can hold its mutex: taking it here would only teach Abseil's deadlock
// detector a false lock order (the entry dropped while another's is held).
GraphCache::Entry::~Entry() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  if (exec != nullptr) (void)api::GraphExecDestroy(exec);
}

GraphCache::~GraphCache() {
  absl::MutexLock l(&mu_);
  Metrics().graph_bytes.With({}).Decrement(static_cast<double>(bytes_));
}

void GraphCache::Account(const std::string& key, Entry& keep, int64_t bytes) {
  // Dropped entries are destroyed (their graphs and buffers freed) after
  // the cache's mutex is released.
  std::vector<std::shared_ptr<Entry>> dropped;
  absl::MutexLock l(&mu_);
  auto it = entries_.find(key);
  if (it == entries_.end() || it->second.get() != &keep) return;  // dropped meanwhile
  keep.bytes = bytes;
  bytes_ += bytes;
  Metrics().graph_bytes.With({}).Increment(static_cast<double>(bytes));
  auto drop = [&](std::map<std::string, std::shared_ptr<Entry>>::iterator e) {
    bytes_ -= e->second->bytes;
    Metrics().graph_bytes.With({}).Decrement(static_cast<double>(e->second->bytes));
    Metrics().graph_evictions.With({}).Increment();
    dropped.push_back(std::move(e->second));  // freed when the last call using it lets go
    entries_.erase(e);
  };
  while (bytes_ > max_bytes_ || static_cast<int64_t>(entries_.size()) > max_entries_) {
    auto oldest = entries_.end();
    for (auto e = entries_.begin(); e != entries_.end(); ++e) {
      if (e->second.get() == &keep) continue;
      if (oldest == entries_.end() || e->second->last_used < oldest->second->last_used) {
        oldest = e;
      }
    }
    if (oldest == entries_.end()) break;
    drop(oldest);
  }
  if (bytes_ > max_bytes_) drop(entries_.find(key));
}

void GraphCache::Erase(const std::string& key, const Entry& entry) {
  std::shared_ptr<Entry> dropped;  // destroyed after the mutex is released
  absl::MutexLock l(&mu_);
  auto it = entries_.find(key);
  if (it == entries_.end() || it->second.get() != &entry) return;
  bytes_ -= it->second->bytes;
  Metrics().graph_bytes.With({}).Decrement(static_cast<double>(it->second->bytes));
  dropped = std::move(it->second);
  entries_.erase(it);
}

bool GraphCache::SeenBefore(const std::string& key) {
  // A signature holds its attributes' values (a string attribute may be a
  // MiB): the seen set keeps a hash of it, not the signature. A collision
  // only captures a signature on its first call.
  const size_t hash = std::hash<std::string>{}(key);
  auto it = seen_.find(hash);
  if (it != seen_.end()) {
    seen_.erase(it);
    return true;
  }
  const size_t most = static_cast<size_t>(std::max<int64_t>(16, 4 * max_entries_));
  while (seen_.size() >= most) {
    auto oldest = seen_.begin();
    for (auto e = seen_.begin(); e != seen_.end(); ++e) {
      if (e->second < oldest->second) oldest = e;
    }
    seen_.erase(oldest);
  }
  seen_[hash] = ++clock_;
  return false;
}

absl::Status GraphCache::Run(const RegisteredHandler& handler, HandlerInvocation& inv,
                             Stream& stream) {
  std::shared_ptr<Entry> entry;
  const std::string key = GraphSignature(handler, inv);
  auto native = static_cast<api::StreamT>(stream.native());
  {
    absl::MutexLock l(&mu_);
    if (entries_.count(key) != 0 || SeenBefore(key)) {
      std::shared_ptr<Entry>& e = entries_[key];
      if (e == nullptr) e = std::make_shared<Entry>();
      e->last_used = ++clock_;
      entry = e;
    }
  }
  if (entry == nullptr) {
    // Seen once: run as any handler; a graph waits for the second call.
    Metrics().graph_misses.With({}).Increment();
    return InvokeHandler(handler.fn, inv);
  }
  absl::MutexLock l(&entry->mu);
  if (entry->exec == nullptr && entry->args.empty() && entry->results.empty()) {
    // Built aside, and kept only whole: a failed allocation leaves no entry
    // half made for the next call of this signature to read past.
    std::vector<std::unique_ptr<DeviceMemory>> args, results;
    // The entry's key (its signature) counts too: attributes may be long.
    int64_t bytes = kEntryOverheadBytes + static_cast<int64_t>(key.size());
    absl::Status allocated = [&]() -> absl::Status {
      auto allocate = [&](const FarcallBuffer& b) -> absl::StatusOr<std::unique_ptr<DeviceMemory>> {
        bytes += static_cast<int64_t>(b.size_bytes);
        return device_.Allocate(static_cast<int64_t>(b.size_bytes));
      };
      for (const FarcallBuffer& b : inv.args) {
        FARCALL_ASSIGN_OR_RETURN(std::unique_ptr<DeviceMemory> m, allocate(b));
        args.push_back(std::move(m));
      }
      for (const FarcallBuffer& b : inv.results) {
        if (b.aliased_arg >= 0) {
          results.push_back(nullptr);  // the arg's buffer
          continue;
        }
        FARCALL_ASSIGN_OR_RETURN(std::unique_ptr<DeviceMemory> m, allocate(b));
        results.push_back(std::move(m));
      }
      return absl::OkStatus();
    }();
    if (!allocated.ok()) {
      Erase(key, *entry);
      return allocated;
    }
    entry->args = std::move(args);
    entry->results = std::move(results);
    Account(key, *entry, bytes);
  }
  (entry->exec == nullptr ? Metrics().graph_misses : Metrics().graph_hits).With({}).Increment();
  auto result_memory = [&](size_t o) -> DeviceMemory& {
    const int64_t alias = inv.results[o].aliased_arg;
    return alias >= 0 ? *entry->args[alias] : *entry->results[o];
  };
  // The call's inputs into the graph's buffers.
  for (size_t i = 0; i < inv.args.size(); ++i) {
    if (inv.args[i].size_bytes == 0) continue;
    FARCALL_GPU_RETURN_IF_ERROR(api::CopyD2D(entry->args[i]->device_ptr(), inv.args[i].data,
                                             inv.args[i].size_bytes, native));
  }
  if (entry->exec == nullptr) {
    // Capture: the handler's host code runs now, and never again for this
    // signature on this device.
    HandlerInvocation captured = inv;
    for (size_t i = 0; i < captured.args.size(); ++i) {
      captured.args[i].data = entry->args[i]->device_ptr();
    }
    for (size_t o = 0; o < captured.results.size(); ++o) {
      captured.results[o].data = result_memory(o).device_ptr();
    }
    FARCALL_GPU_RETURN_IF_ERROR(api::StreamSynchronize(native));
    FARCALL_GPU_RETURN_IF_ERROR(api::BeginCapture(native));
    absl::Status ran = InvokeHandler(handler.fn, captured);
    api::GraphT graph = nullptr;
    const api::Error ended = api::EndCapture(native, &graph);
    if (ended != api::kSuccess) {
      // The capture broke (the handler synchronised, say): whatever the
      // handler itself answered, the cause is the trait.
      ran = absl::FailedPreconditionError(
          absl::StrCat("handler '", handler.name,
                       "' is registered command_buffer_compatible, but its work could not be "
                       "captured as a graph (",
                       api::ErrorName(ended), ": ", api::ErrorString(ended),
                       ran.ok() ? "" : absl::StrCat("; the handler said: ", ran.message()),
                       "); a compatible handler only enqueues work on the call's stream and "
                       "never synchronises."));
      // Clear the error the broken capture left on this thread.
      (void)api::GetLastError();
    }
    if (!ran.ok()) {
      if (graph != nullptr) (void)api::GraphDestroy(graph);
      Erase(key, *entry);
      return ran;
    }
    const api::Error inst = api::GraphInstantiate(&entry->exec, graph);
    (void)api::GraphDestroy(graph);
    if (inst != api::kSuccess) {
      entry->exec = nullptr;
      Erase(key, *entry);
      return api::ToStatus(inst, "GraphInstantiate");
    }
  }
  FARCALL_GPU_RETURN_IF_ERROR(api::GraphLaunch(entry->exec, native));
  // The graph's results out to the call's buffers (an aliased result is
  // the call's arg buffer, updated in place as the handler would have).
  for (size_t o = 0; o < inv.results.size(); ++o) {
    if (inv.results[o].size_bytes == 0) continue;
    FARCALL_GPU_RETURN_IF_ERROR(api::CopyD2D(inv.results[o].data, result_memory(o).device_ptr(),
                                             inv.results[o].size_bytes, native));
  }
  // The entry's buffers are free for the next call once this is done.
  FARCALL_GPU_RETURN_IF_ERROR(api::StreamSynchronize(native));
  return absl::OkStatus();
}

}  // namespace farcall::agent::FARCALL_GPU_NS
