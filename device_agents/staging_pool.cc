#include "device_agents/staging_pool.h"

#include <algorithm>
#include <utility>

namespace farcall::agent {

// A block on loan from the pool; goes back when destroyed.
class StagingPool::Lease final : public StagingBlock {
 public:
  Lease(std::shared_ptr<StagingPool> pool, std::unique_ptr<StagingBlock> block)
      : pool_(std::move(pool)), block_(std::move(block)) {}
  ~Lease() override { pool_->Return(std::move(block_)); }
  uint8_t* data() override { return block_->data(); }
  int64_t size() const override { return block_->size(); }
  absl::Status Record(Stream& stream) override { return block_->Record(stream); }
  absl::Status Wait() override { return block_->Wait(); }

 private:
  std::shared_ptr<StagingPool> pool_;
  std::unique_ptr<StagingBlock> block_;
};

std::shared_ptr<StagingPool> StagingPool::Create(int64_t total_bytes, int64_t block_bytes,
                                                 Factory make) {
  block_bytes = std::max<int64_t>(block_bytes, 4096);
  const int capacity = static_cast<int>(std::max<int64_t>(1, total_bytes / block_bytes));
  return std::shared_ptr<StagingPool>(new StagingPool(capacity, block_bytes, std::move(make)));
}

std::unique_ptr<StagingBlock> StagingPool::TryAcquire() {
  std::unique_ptr<StagingBlock> block;
  {
    absl::MutexLock l(&mu_);
    if (!free_.empty()) {
      block = std::move(free_.back());
      free_.pop_back();
    } else if (made_ < capacity_) {
      ++made_;
    } else {
      return nullptr;
    }
  }
  if (block == nullptr) {
    absl::StatusOr<std::unique_ptr<StagingBlock>> made = make_(block_bytes_);
    if (!made.ok()) {
      absl::MutexLock l(&mu_);
      --made_;
      return nullptr;
    }
    block = *std::move(made);
  }
  // A block's last copy may still be running; the new holder must not
  // overwrite it before it finished.
  if (!block->Wait().ok()) {
    absl::MutexLock l(&mu_);
    --made_;  // the block is dropped with its broken device state
    return nullptr;
  }
  return std::make_unique<Lease>(shared_from_this(), std::move(block));
}

void StagingPool::Return(std::unique_ptr<StagingBlock> block) {
  absl::MutexLock l(&mu_);
  free_.push_back(std::move(block));
}

int StagingPool::free_blocks() const {
  absl::MutexLock l(&mu_);
  return static_cast<int>(free_.size()) + (capacity_ - made_);
}

}  // namespace farcall::agent
