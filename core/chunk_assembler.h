// Chunk assembly: checks that the chunks of each tensor cover [0, size)
// exactly once, in increasing offset order, and says where each chunk's bytes
// go, so that the transport copies them straight into the tensor.
//
// Not thread-safe: one call's chunks arrive in order on one stream.
#ifndef FARCALL_CORE_CHUNK_ASSEMBLER_H_
#define FARCALL_CORE_CHUNK_ASSEMBLER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/tensor_spec.h"

namespace farcall {

class ChunkAssembler {
 public:
  struct Target {
    TensorSpec spec;
    int64_t size = 0;
    // `size` writable bytes, not owned; null when the bytes go elsewhere
    // (device memory): Accept() then only checks and returns null.
    uint8_t* data = nullptr;
  };

  // `kind` names the tensors in messages: "args" or "results".
  ChunkAssembler(std::string kind, std::vector<Target> targets);

  // Validates the chunk [offset, offset + size) of tensor `index` and
  // returns where its bytes go. INVALID_ARGUMENT for an unknown index, a gap,
  // an overlap, or bytes past the end, naming the tensor and the offsets.
  absl::StatusOr<uint8_t*> Accept(uint32_t index, uint64_t offset, uint64_t size);

  // OK when every tensor is complete; else names the first one missing data.
  absl::Status Finish() const;

  int64_t received_bytes() const { return received_; }

 private:
  std::string Name(uint32_t index) const;

  std::string kind_;
  std::vector<Target> targets_;
  std::vector<uint64_t> next_;  // next expected offset per tensor
  int64_t received_ = 0;
};

}  // namespace farcall

#endif  // FARCALL_CORE_CHUNK_ASSEMBLER_H_
