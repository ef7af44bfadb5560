#include "core/chunk_assembler.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace farcall {

ChunkAssembler::ChunkAssembler(std::string kind, std::vector<Target> targets)
    : kind_(std::move(kind)), targets_(std::move(targets)), next_(targets_.size(), 0) {}

std::string ChunkAssembler::Name(uint32_t index) const {
  return absl::StrCat(kind_, "[", index, "] (", SpecToString(targets_[index].spec), ", ",
                      targets_[index].size, " bytes)");
}

absl::StatusOr<uint8_t*> ChunkAssembler::Accept(uint32_t index, uint64_t offset, uint64_t size) {
  if (index >= targets_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("chunk for ", kind_, "[", index, "] at offset ",
                                                   offset, ", but the call has ", targets_.size(),
                                                   " ", kind_, "."));
  }
  const uint64_t total = static_cast<uint64_t>(targets_[index].size);
  const uint64_t expected = next_[index];
  if (offset < expected) {
    return absl::InvalidArgumentError(absl::StrCat(Name(index), ": chunk at offset ", offset,
                                                   " overlaps bytes already received [0, ",
                                                   expected, ")."));
  }
  if (offset > expected) {
    return absl::InvalidArgumentError(absl::StrCat(Name(index), ": chunk at offset ", offset,
                                                   " leaves a gap; bytes [", expected, ", ", offset,
                                                   ") were never sent."));
  }
  if (size > total - offset) {
    return absl::InvalidArgumentError(
        absl::StrCat(Name(index), ": chunk [", offset, ", ", offset + size,
                     ") runs past the end of the tensor at ", total, "."));
  }
  next_[index] = offset + size;
  received_ += static_cast<int64_t>(size);
  if (targets_[index].data == nullptr) return nullptr;  // device memory
  return targets_[index].data + offset;
}

absl::Status ChunkAssembler::Finish() const {
  for (uint32_t i = 0; i < targets_.size(); ++i) {
    if (next_[i] != static_cast<uint64_t>(targets_[i].size)) {
      return absl::InvalidArgumentError(
          absl::StrCat(Name(i), ": data missing at half-close; received [0, ", next_[i],
                       ") of [0, ", targets_[i].size, ")."));
    }
  }
  return absl::OkStatus();
}

}  // namespace farcall
