// Moving one call's bytes between the host and a device through pinned
// staging blocks (the device's StagingPool):
//   InputStager     request chunks gather in a block, which is copied to the
//                   device asynchronously when full, so that the copy of one
//                   block overlaps the receiving of the next;
//   ResultPipeline  results are copied back a few blocks ahead of sending.
// Both fall back to this call's own blocks, then to plain host memory, when
// the pool is out.
//
// Thread safety: thread-compatible: one call's, used by one thread at a time.
#ifndef FARCALL_DEVICE_AGENTS_DEVICE_STAGING_H_
#define FARCALL_DEVICE_AGENTS_DEVICE_STAGING_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/wire/frame_codec.h"
#include "device_agents/device.h"

namespace farcall::agent {

// Staging blocks a call keeps in flight at once, each way.
inline constexpr size_t kMaxBlocksInFlight = 4;

class InputStager {
 public:
  InputStager(Device& device, Stream& stream) : device_(device), stream_(stream) {}
  // Takes `data`, bytes [offset, offset + data.size()) of arg `index`, whose
  // device memory `dst` holds `size` bytes.
  absl::Status Stage(uint32_t index, DeviceMemory& dst, int64_t size, uint64_t offset,
                     const ChunkBytes& data);
  // The same, for `n` bytes in host memory at `data` (a UCX piece).
  absl::Status Stage(uint32_t index, DeviceMemory& dst, int64_t size, uint64_t offset,
                     const uint8_t* data, uint64_t n);
  // At half-close: copies what the open block holds, and gives the blocks
  // back to the pool (the handler runs after their copies, on the stream).
  absl::Status Finish();

 private:
  // Bytes [from, from + n) of what is staged, copied to `to`.
  using CopyRange = absl::FunctionRef<void(uint64_t from, uint64_t n, uint8_t* to)>;
  absl::Status StageFrom(uint32_t index, DeviceMemory& dst, int64_t size, uint64_t offset,
                         uint64_t n, CopyRange copy);
  absl::Status Flush();

  Device& device_;
  Stream& stream_;
  std::unique_ptr<StagingBlock> open_;
  DeviceMemory* open_dst_ = nullptr;
  uint32_t tensor_ = 0;
  int64_t offset_ = 0;
  int64_t fill_ = 0;
  std::deque<std::unique_ptr<StagingBlock>> in_flight_;
};

// A range of one result, being copied into a staging block.
struct StagedResult {
  std::unique_ptr<StagingBlock> block;
  uint32_t tensor = 0;
  int64_t offset = 0;
  int64_t size = 0;
};

class ResultPipeline {
 public:
  // `results`: each result's device memory and size, in order.
  ResultPipeline(Device& device, Stream& stream,
                 std::vector<std::pair<DeviceMemory*, int64_t>> results)
      : device_(device), stream_(stream), results_(std::move(results)) {}
  // Starts copies until kMaxBlocksInFlight are under way, each of at most
  // `max_chunk_bytes`.
  absl::Status Fill(int64_t max_chunk_bytes);
  // The oldest copy, waited for; nullopt when none is under way.
  absl::StatusOr<std::optional<StagedResult>> Next();
  // Every byte was copied and handed out.
  bool done() const { return pending_.empty() && index_ >= results_.size(); }

 private:
  Device& device_;
  Stream& stream_;
  const std::vector<std::pair<DeviceMemory*, int64_t>> results_;
  std::deque<StagedResult> pending_;
  size_t index_ = 0;  // the next range to copy
  int64_t offset_ = 0;
};

}  // namespace farcall::agent

#endif  // FARCALL_DEVICE_AGENTS_DEVICE_STAGING_H_
