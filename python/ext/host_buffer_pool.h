// Host buffers for the CUDA FFI handler's copies, reused across calls:
// pinned memory (cudaMallocHost) costs a system call and page pinning per
// allocation, far more than a small call's copy. Buffers come in size
// classes (powers of two from 64 KiB); a returned buffer waits for the next
// call of its class, and past `max_cached_bytes` returned buffers are freed
// instead. The allocator is given, so the pool is tested with malloc here.
// Thread safe.
#ifndef FARCALL_PYTHON_EXT_HOST_BUFFER_POOL_H_
#define FARCALL_PYTHON_EXT_HOST_BUFFER_POOL_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace farcall::python {

class HostBufferPool {
 public:
  // `allocate(bytes)`: memory or an error; `release(p)` frees it.
  using Allocate = std::function<absl::StatusOr<void*>(size_t bytes)>;
  using Release = std::function<void(void* p)>;
  HostBufferPool(Allocate allocate, Release release, size_t max_cached_bytes);
  // Frees every cached buffer; leases must be gone by then.
  ~HostBufferPool();

  // A buffer of at least `bytes`, back to the pool when the lease goes.
  class Lease {
   public:
    Lease() = default;
    Lease(Lease&& other) noexcept;
    Lease& operator=(Lease&& other) noexcept;
    ~Lease();
    void* data() const { return data_; }

   private:
    friend class HostBufferPool;
    Lease(HostBufferPool* pool, void* data, size_t size_class)
        : pool_(pool), data_(data), size_class_(size_class) {}
    HostBufferPool* pool_ = nullptr;
    void* data_ = nullptr;
    size_t size_class_ = 0;
  };
  // An empty lease (null data) for 0 bytes.
  absl::StatusOr<Lease> Take(size_t bytes);

  // The size class of `bytes`: the power of two that holds it, at least
  // kMinClass.
  static size_t SizeClass(size_t bytes);
  static constexpr size_t kMinClass = size_t{64} << 10;

  // Bytes of returned buffers waiting for reuse, and allocations made.
  size_t cached_bytes() const;
  int64_t allocations() const;

 private:
  void Return(void* data, size_t size_class);

  const Allocate allocate_;
  const Release release_;
  const size_t max_cached_bytes_;
  mutable absl::Mutex mu_;
  std::map<size_t, std::vector<void*>> free_ ABSL_GUARDED_BY(mu_);  // by size class
  size_t cached_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t allocations_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace farcall::python

#endif  // FARCALL_PYTHON_EXT_HOST_BUFFER_POOL_H_
