// The bounded pool of pinned staging blocks a device copies through. Blocks
// are made on first use, up to the pool's size, and kept for the process:
// pinning memory is slow, so no call pays for it after the first ones.
//
// A block handed out returns to the pool when the holder drops it, which may
// be after the call has ended (gRPC holds result blocks until sent), so the
// pool is shared by the blocks it hands out.
//
// Thread safety: thread-safe.
#ifndef FARCALL_DEVICE_AGENTS_STAGING_POOL_H_
#define FARCALL_DEVICE_AGENTS_STAGING_POOL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "device_agents/device.h"

namespace farcall::agent {

class StagingPool : public std::enable_shared_from_this<StagingPool> {
 public:
  // Makes one pinned block of `block_bytes`.
  using Factory = std::function<absl::StatusOr<std::unique_ptr<StagingBlock>>(int64_t)>;

  // Up to max(1, total_bytes / block_bytes) blocks.
  static std::shared_ptr<StagingPool> Create(int64_t total_bytes, int64_t block_bytes,
                                             Factory make);

  // A free block, or null when all are out (or pinning failed: the caller
  // then falls back to what it holds or to plain memory).
  std::unique_ptr<StagingBlock> TryAcquire();

  int64_t block_bytes() const { return block_bytes_; }
  int capacity() const { return capacity_; }
  int free_blocks() const;

 private:
  class Lease;
  StagingPool(int capacity, int64_t block_bytes, Factory make)
      : capacity_(capacity), block_bytes_(block_bytes), make_(std::move(make)) {}
  void Return(std::unique_ptr<StagingBlock> block);

  const int capacity_;
  const int64_t block_bytes_;
  const Factory make_;
  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<StagingBlock>> free_ ABSL_GUARDED_BY(mu_);
  int made_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace farcall::agent

#endif  // FARCALL_DEVICE_AGENTS_STAGING_POOL_H_
