#include "python/ext/host_buffer_pool.h"

#include <utility>

namespace farcall::python {

HostBufferPool::HostBufferPool(Allocate allocate, Release release, size_t max_cached_bytes)
    : allocate_(std::move(allocate)),
      release_(std::move(release)),
      max_cached_bytes_(max_cached_bytes) {}

HostBufferPool::~HostBufferPool() {
  absl::MutexLock l(&mu_);
  for (auto& [size_class, buffers] : free_) {
    for (void* p : buffers) release_(p);
  }
}

size_t HostBufferPool::SizeClass(size_t bytes) {
  size_t c = kMinClass;
  while (c < bytes) c <<= 1;
  return c;
}

absl::StatusOr<HostBufferPool::Lease> HostBufferPool::Take(size_t bytes) {
  if (bytes == 0) return Lease();
  const size_t size_class = SizeClass(bytes);
  {
    absl::MutexLock l(&mu_);
    auto it = free_.find(size_class);
    if (it != free_.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      cached_bytes_ -= size_class;
      return Lease(this, p, size_class);
    }
    ++allocations_;
  }
  absl::StatusOr<void*> p = allocate_(size_class);
  if (!p.ok()) return p.status();
  return Lease(this, *p, size_class);
}

void HostBufferPool::Return(void* data, size_t size_class) {
  {
    absl::MutexLock l(&mu_);
    if (cached_bytes_ + size_class <= max_cached_bytes_) {
      free_[size_class].push_back(data);
      cached_bytes_ += size_class;
      return;
    }
  }
  release_(data);
}

size_t HostBufferPool::cached_bytes() const {
  absl::MutexLock l(&mu_);
  return cached_bytes_;
}

int64_t HostBufferPool::allocations() const {
  absl::MutexLock l(&mu_);
  return allocations_;
}

HostBufferPool::Lease::Lease(Lease&& other) noexcept
    : pool_(std::exchange(other.pool_, nullptr)),
      data_(std::exchange(other.data_, nullptr)),
      size_class_(other.size_class_) {}

HostBufferPool::Lease& HostBufferPool::Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    if (pool_ != nullptr) pool_->Return(data_, size_class_);
    pool_ = std::exchange(other.pool_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
    size_class_ = other.size_class_;
  }
  return *this;
}

HostBufferPool::Lease::~Lease() {
  if (pool_ != nullptr) pool_->Return(data_, size_class_);
}

}  // namespace farcall::python
