// Graph capture for handlers registered command_buffer_compatible: the first
// call of a signature (handler, arg and result specs, aliases, attributes)
// on a device runs the handler as any other; the second runs its host code
// once under stream capture; every later call replays the captured graph.
// A signature seen once is not worth a graph's memory: a learning-rate
// schedule that changes an attribute every step would otherwise fill the
// cache with graphs that never replay. So a handler's host code runs at
// most twice per signature (JAX's contract asks for once per compiled
// program; capture is an optimisation it allows).
//
// A graph bakes in the buffers it was captured with, so each entry owns
// device buffers of its signature: a call's inputs are copied in (device to
// device), the graph runs, and the results are copied out. Calls of one
// signature on one device take turns on its entry.
//
// Entries hold device memory, so the cache keeps at most `max_bytes` of
// them (--graph_cache_bytes, each entry counting its signature's bytes and
// kEntryOverheadBytes beyond its buffers) and at most `max_entries` (--graph_cache_entries),
// dropping the least recently used first; a dropped entry is freed once no call uses it. An entry
// whose buffers or capture failed is never kept: the next call of its signature starts afresh. The
// signatures seen once are remembered, least recently used first out, up to 4 x `max_entries`.
// Hits, misses, evictions and bytes are exported as farcall_agent_graph_cache_* metrics.
//
// Thread safety: thread-safe.
#ifndef FARCALL_DEVICE_AGENTS_GPU_GRAPH_CACHE_H_
#define FARCALL_DEVICE_AGENTS_GPU_GRAPH_CACHE_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "device_agents/device.h"
#include "device_agents/gpu/gpu_api.h"
#include "device_agents/handler_registry.h"
#include "device_agents/handler_runtime.h"

namespace farcall::agent::FARCALL_GPU_NS {

// The cache key of a call: equal exactly when a captured graph may replay.
std::string GraphSignature(const RegisteredHandler& handler, const HandlerInvocation& inv);

class GraphCache {
 public:
  // What an entry costs beyond its buffers (the graph itself, its nodes).
  static constexpr int64_t kEntryOverheadBytes = 64 << 10;

  GraphCache(Device& device, int64_t max_bytes, int64_t max_entries = 1024)
      : device_(device), max_bytes_(max_bytes), max_entries_(max_entries) {}
  ~GraphCache();

  // Runs `handler` for `inv` on `stream` through the signature's graph,
  // capturing it first if needed. Returns once the results are in `inv`'s
  // buffers (the stream is synchronised).
  absl::Status Run(const RegisteredHandler& handler, HandlerInvocation& inv, Stream& stream);

 private:
  struct Entry {
    ~Entry();
    absl::Mutex mu;
    api::GraphExecT exec ABSL_GUARDED_BY(mu) = nullptr;
    std::vector<std::unique_ptr<DeviceMemory>> args ABSL_GUARDED_BY(mu);
    std::vector<std::unique_ptr<DeviceMemory>> results ABSL_GUARDED_BY(mu);
    int64_t bytes = 0;       // its buffers, once allocated; under the cache's mu_
    uint64_t last_used = 0;  // the cache's clock at its last call; under mu_
  };
  // Counts `entry`'s bytes in and drops least recently used entries (never
  // `keep`) until the cache fits; drops `keep` too if it alone does not.
  void Account(const std::string& key, Entry& keep, int64_t bytes);
  // Forgets `key`'s entry if it is still `entry` (its buffers or capture
  // failed).
  void Erase(const std::string& key, const Entry& entry);
  // Whether `key` was seen before; records it as seen.
  bool SeenBefore(const std::string& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Device& device_;
  const int64_t max_bytes_;
  const int64_t max_entries_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<Entry>> entries_ ABSL_GUARDED_BY(mu_);
  int64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t clock_ ABSL_GUARDED_BY(mu_) = 0;
  // Signatures seen once (their hashes), with the clock when last seen.
  std::map<size_t, uint64_t> seen_ ABSL_GUARDED_BY(mu_);
};

}  // namespace farcall::agent::FARCALL_GPU_NS

#endif  // FARCALL_DEVICE_AGENTS_GPU_GRAPH_CACHE_H_
