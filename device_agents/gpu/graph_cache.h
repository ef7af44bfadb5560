// Graph capture for handlers registered command_buffer_compatible: the first
// call of a signature (handler, arg and result specs, aliases, attributes)
// on a device runs the handler's host code once under stream capture; every
// later call replays the captured graph. That is JAX's contract: such a
// handler's host code runs once per signature.
//
// A graph bakes in the buffers it was captured with, so each entry owns
// device buffers of its signature: a call's inputs are copied in (device to
// device), the graph runs, and the results are copied out. Calls of one
// signature on one device take turns on its entry.
//
// Entries hold device memory, so the cache keeps at most `max_bytes` of
// them (--graph_cache_bytes), dropping the least recently used first; a
// dropped entry is freed once no call uses it. Hits, misses, evictions and
// bytes are exported as farcall_agent_graph_cache_* metrics.
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
  GraphCache(Device& device, int64_t max_bytes) : device_(device), max_bytes_(max_bytes) {}
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

  Device& device_;
  const int64_t max_bytes_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<Entry>> entries_ ABSL_GUARDED_BY(mu_);
  int64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t clock_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace farcall::agent::FARCALL_GPU_NS

#endif  // FARCALL_DEVICE_AGENTS_GPU_GRAPH_CACHE_H_
