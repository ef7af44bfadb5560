#include "device_agents/device_staging.h"

#include <algorithm>
#include <cstring>

#include "core/status_macros.h"
#include "device_agents/agent_metrics.h"

namespace farcall::agent {
namespace {

constexpr int64_t kPlainBlockBytes = int64_t{4} << 20;

// Staging in plain host memory, when the device's pinned pool is all out:
// correct, but its copies wait for the whole stream.
class PlainStagingBlock final : public StagingBlock {
 public:
  explicit PlainStagingBlock(int64_t size) : data_(size) {}
  // Its memory must outlive the copy that reads or fills it.
  ~PlainStagingBlock() override { Wait().IgnoreError(); }
  uint8_t* data() override { return data_.data(); }
  int64_t size() const override { return static_cast<int64_t>(data_.size()); }
  absl::Status Record(Stream& stream) override {
    stream_ = &stream;
    return absl::OkStatus();
  }
  absl::Status Wait() override {
    if (stream_ == nullptr) return absl::OkStatus();
    Stream* s = stream_;
    stream_ = nullptr;
    return s->Synchronize();
  }

 private:
  std::vector<uint8_t> data_;
  Stream* stream_ = nullptr;
};

// A free pinned block; when the pool is out, the oldest of `in_flight` once
// its copy is done; else plain memory of up to `want` bytes.
absl::StatusOr<std::unique_ptr<StagingBlock>> NextBlock(
    Device& device, std::deque<std::unique_ptr<StagingBlock>>& in_flight, int64_t want) {
  if (in_flight.size() < kMaxBlocksInFlight) {
    if (auto b = device.TryAcquireStaging()) return b;
  }
  if (!in_flight.empty()) {
    std::unique_ptr<StagingBlock> b = std::move(in_flight.front());
    in_flight.pop_front();
    FARCALL_RETURN_IF_ERROR(b->Wait());
    return b;
  }
  Metrics().staging_fallbacks.With({}).Increment();
  return std::make_unique<PlainStagingBlock>(std::min(want, kPlainBlockBytes));
}

}  // namespace

absl::Status InputStager::Stage(uint32_t index, DeviceMemory& dst, int64_t size, uint64_t offset,
                                const ChunkBytes& data) {
  return StageFrom(
      index, dst, size, offset, data.size(),
      [&data](uint64_t from, uint64_t n, uint8_t* to) { data.CopyRangeTo(from, n, to); });
}

absl::Status InputStager::Stage(uint32_t index, DeviceMemory& dst, int64_t size, uint64_t offset,
                                const uint8_t* data, uint64_t n) {
  return StageFrom(index, dst, size, offset, n, [data](uint64_t from, uint64_t k, uint8_t* to) {
    std::memcpy(to, data + from, k);
  });
}

absl::Status InputStager::StageFrom(uint32_t index, DeviceMemory& dst, int64_t size,
                                    uint64_t offset, uint64_t total, CopyRange copy) {
  uint64_t done = 0;
  while (done < total) {
    const int64_t at = static_cast<int64_t>(offset + done);
    if (open_ != nullptr && (tensor_ != index || offset_ + fill_ != at || fill_ == open_->size())) {
      FARCALL_RETURN_IF_ERROR(Flush());
    }
    if (open_ == nullptr) {
      FARCALL_ASSIGN_OR_RETURN(open_, NextBlock(device_, in_flight_, size - at));
      open_dst_ = &dst;
      tensor_ = index;
      offset_ = at;
      fill_ = 0;
    }
    const uint64_t n = std::min<uint64_t>(total - done, open_->size() - fill_);
    copy(done, n, open_->data() + fill_);
    fill_ += static_cast<int64_t>(n);
    done += n;
    if (fill_ == open_->size()) FARCALL_RETURN_IF_ERROR(Flush());
  }
  return absl::OkStatus();
}

absl::Status InputStager::Flush() {
  if (open_ == nullptr || fill_ == 0) return absl::OkStatus();
  FARCALL_RETURN_IF_ERROR(stream_.CopyToDevice(open_->data(), *open_dst_, offset_, fill_));
  FARCALL_RETURN_IF_ERROR(open_->Record(stream_));
  in_flight_.push_back(std::move(open_));
  fill_ = 0;
  return absl::OkStatus();
}

absl::Status InputStager::Finish() {
  FARCALL_RETURN_IF_ERROR(Flush());
  // Back to the pool: the next holder waits for their copies to finish, and
  // the handler runs after them on this stream.
  open_.reset();
  in_flight_.clear();
  return absl::OkStatus();
}

absl::Status ResultPipeline::Fill(int64_t max_chunk_bytes) {
  std::deque<std::unique_ptr<StagingBlock>> none;
  while (pending_.size() < kMaxBlocksInFlight && index_ < results_.size()) {
    const auto& [memory, size] = results_[index_];
    const int64_t left = size - offset_;
    if (left == 0) {
      ++index_;
      offset_ = 0;
      continue;
    }
    FARCALL_ASSIGN_OR_RETURN(std::unique_ptr<StagingBlock> block,
                             NextBlock(device_, none, std::min(left, max_chunk_bytes)));
    StagedResult r;
    r.tensor = static_cast<uint32_t>(index_);
    r.offset = offset_;
    r.size = std::min({left, block->size(), max_chunk_bytes});
    FARCALL_RETURN_IF_ERROR(stream_.CopyToHost(*memory, r.offset, r.size, block->data()));
    FARCALL_RETURN_IF_ERROR(block->Record(stream_));
    r.block = std::move(block);
    offset_ += r.size;
    pending_.push_back(std::move(r));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<StagedResult>> ResultPipeline::Next() {
  if (pending_.empty()) return std::optional<StagedResult>();
  StagedResult r = std::move(pending_.front());
  pending_.pop_front();
  FARCALL_RETURN_IF_ERROR(r.block->Wait());
  return std::optional<StagedResult>(std::move(r));
}

}  // namespace farcall::agent
