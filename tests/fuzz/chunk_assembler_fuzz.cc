// libFuzzer: chunk assembly. The input is a list of (index, offset, size)
// chunks for three small tensors; every accepted chunk must lie inside its
// tensor (ASan checks the write), and no byte may be accepted twice.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/chunk_assembler.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int64_t sizes[3] = {0, 7, 300};
  std::vector<std::vector<uint8_t>> memory;
  std::vector<farcall::ChunkAssembler::Target> targets;
  for (int64_t s : sizes) {
    memory.emplace_back(static_cast<size_t>(s));
    targets.push_back({farcall::TensorSpec{farcall::DType::kU8, {s}}, s, memory.back().data()});
  }
  std::vector<std::vector<uint8_t>> written;
  for (int64_t s : sizes) written.emplace_back(static_cast<size_t>(s), 0);
  farcall::ChunkAssembler assembler("args", targets);
  for (size_t i = 0; i + 5 <= size; i += 5) {
    const uint32_t index = data[i] % 4;  // 3 is unknown
    const uint64_t offset = data[i + 1] | (uint64_t{data[i + 2]} << 8);
    const uint64_t n = data[i + 3] | (uint64_t{data[i + 4]} << 8);
    absl::StatusOr<uint8_t*> dst = assembler.Accept(index, offset, n);
    if (!dst.ok()) continue;
    if (index >= 3 || offset + n > static_cast<uint64_t>(sizes[index])) std::abort();
    for (uint64_t b = offset; b < offset + n; ++b) {
      if (written[index][b]++) std::abort();  // accepted twice
    }
    if (n > 0) std::memset(*dst, 0xab, n);
  }
  (void)assembler.Finish();
  return 0;
}
