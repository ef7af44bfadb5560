// A caching allocator for device memory, so that calls do not pay a
// cudaMalloc (or hipMalloc, clCreateBuffer) each: freed blocks are kept by
// size and handed to the next call that fits them. When the device runs out
// of memory the cache is given back and the allocation tried once more; only
// then does the call get RESOURCE_EXHAUSTED.
//
// Sizes are rounded (powers of two up to 1 MiB, then 2 MiB steps) so that
// blocks are reused across calls whose sizes differ a little.
//
// Thread safety: thread-safe.
#ifndef FARCALL_DEVICE_AGENTS_MEMORY_POOL_H_
#define FARCALL_DEVICE_AGENTS_MEMORY_POOL_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "device_agents/device.h"

namespace farcall::agent {

class CachingAllocator {
 public:
  struct RawOps {
    // RESOURCE_EXHAUSTED when the device is out of memory; any other error
    // is returned as it is.
    std::function<absl::StatusOr<void*>(int64_t bytes)> allocate;
    std::function<void(void*)> free;
    // The blocks are host memory (a cpu device's): DeviceMemory::host_ptr
    // gives them.
    bool host = false;
  };

  // `what` names the device in messages ("cuda device 0"). At most
  // `max_cached_bytes` of free blocks are kept.
  CachingAllocator(std::string what, RawOps ops, int64_t max_cached_bytes);
  ~CachingAllocator();  // frees the cached blocks; all memory must be back
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // Device memory of at least `size` bytes, returned here when destroyed.
  // The allocator must outlive it.
  absl::StatusOr<std::unique_ptr<DeviceMemory>> Allocate(int64_t size);

  int64_t in_use_bytes() const;
  int64_t cached_bytes() const;
  // Frees every cached block.
  void Trim();

  static int64_t RoundSize(int64_t size);

 private:
  class Block;
  void Release(void* ptr, int64_t capacity);

  const std::string what_;
  const RawOps ops_;
  const int64_t max_cached_;
  mutable absl::Mutex mu_;
  std::multimap<int64_t, void*> cached_ ABSL_GUARDED_BY(mu_);  // by capacity
  int64_t cached_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t in_use_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace farcall::agent

#endif  // FARCALL_DEVICE_AGENTS_MEMORY_POOL_H_
