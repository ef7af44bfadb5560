#include "device_agents/memory_pool.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace farcall::agent {

class CachingAllocator::Block final : public DeviceMemory {
 public:
  Block(CachingAllocator* owner, void* ptr, int64_t capacity, int64_t size)
      : owner_(owner), ptr_(ptr), capacity_(capacity), size_(size) {}
  ~Block() override { owner_->Release(ptr_, capacity_); }
  void* device_ptr() override { return ptr_; }
  uint8_t* host_ptr() override { return owner_->ops_.host ? static_cast<uint8_t*>(ptr_) : nullptr; }
  int64_t size() const override { return size_; }

 private:
  CachingAllocator* owner_;
  void* ptr_;
  int64_t capacity_;
  int64_t size_;
};

CachingAllocator::CachingAllocator(std::string what, RawOps ops, int64_t max_cached_bytes)
    : what_(std::move(what)), ops_(std::move(ops)), max_cached_(max_cached_bytes) {}

CachingAllocator::~CachingAllocator() { Trim(); }

int64_t CachingAllocator::RoundSize(int64_t size) {
  constexpr int64_t kSmall = 1 << 20;
  constexpr int64_t kStep = 2 << 20;
  if (size <= 512) return 512;
  if (size <= kSmall) {
    int64_t r = 512;
    while (r < size) r <<= 1;
    return r;
  }
  return (size + kStep - 1) / kStep * kStep;
}

absl::StatusOr<std::unique_ptr<DeviceMemory>> CachingAllocator::Allocate(int64_t size) {
  const int64_t want = RoundSize(size);
  {
    absl::MutexLock l(&mu_);
    // The smallest cached block that fits, unless it would waste over a
    // quarter of itself.
    auto it = cached_.lower_bound(want);
    if (it != cached_.end() && it->first <= want + want / 4) {
      const int64_t capacity = it->first;
      void* ptr = it->second;
      cached_.erase(it);
      cached_bytes_ -= capacity;
      in_use_bytes_ += capacity;
      return std::make_unique<Block>(this, ptr, capacity, size);
    }
  }
  absl::StatusOr<void*> ptr = ops_.allocate(want);
  if (!ptr.ok() && absl::IsResourceExhausted(ptr.status())) {
    Trim();  // give the cache back to the device, then try once more
    ptr = ops_.allocate(want);
  }
  if (!ptr.ok()) {
    if (!absl::IsResourceExhausted(ptr.status())) return ptr.status();
    return absl::ResourceExhaustedError(
        absl::StrCat(what_, " is out of memory: allocating ", size, " bytes with ", in_use_bytes(),
                     " bytes in use by calls (", ptr.status().message(), ")"));
  }
  absl::MutexLock l(&mu_);
  in_use_bytes_ += want;
  return std::make_unique<Block>(this, *ptr, want, size);
}

void CachingAllocator::Release(void* ptr, int64_t capacity) {
  {
    absl::MutexLock l(&mu_);
    in_use_bytes_ -= capacity;
    if (cached_bytes_ + capacity <= max_cached_) {
      cached_.emplace(capacity, ptr);
      cached_bytes_ += capacity;
      return;
    }
  }
  ops_.free(ptr);
}

void CachingAllocator::Trim() {
  std::vector<void*> out;
  {
    absl::MutexLock l(&mu_);
    for (const auto& [capacity, ptr] : cached_) out.push_back(ptr);
    cached_.clear();
    cached_bytes_ = 0;
  }
  for (void* p : out) ops_.free(p);
}

int64_t CachingAllocator::in_use_bytes() const {
  absl::MutexLock l(&mu_);
  return in_use_bytes_;
}

int64_t CachingAllocator::cached_bytes() const {
  absl::MutexLock l(&mu_);
  return cached_bytes_;
}

}  // namespace farcall::agent
