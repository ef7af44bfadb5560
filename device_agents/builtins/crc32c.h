// CRC-32C (Castagnoli), the checksum the `crc32c` built-in handler returns.
//
// The same function as absl::ComputeCrc32c and the crc32c library: reflected
// polynomial 0x82F63B78, initial value ~0, final xor ~0, so
// Crc32c("123456789", 9) == 0xE3069283. Uses the SSE4.2 crc32 instruction
// when the CPU has it and a slicing-by-8 table otherwise; both give the same
// result. Thread-safe; `data` may have any alignment.
//
//   uint32_t crc = Crc32c(a, na);
//   crc = Crc32c(b, nb, crc);  // == Crc32c of a followed by b
#ifndef FARCALL_DEVICE_AGENTS_BUILTINS_CRC32C_H_
#define FARCALL_DEVICE_AGENTS_BUILTINS_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace farcall::agent::builtins {

// The CRC-32C of `n` bytes at `data`, continuing from `crc`, the CRC-32C of
// the bytes before them (0 to start).
uint32_t Crc32c(const void* data, size_t n, uint32_t crc = 0);

// The table implementation, whatever the CPU supports.
uint32_t Crc32cPortableForTest(const void* data, size_t n, uint32_t crc = 0);

// Whether Crc32c uses the SSE4.2 instruction on this machine.
bool Crc32cUsesHardwareForTest();

}  // namespace farcall::agent::builtins

#endif  // FARCALL_DEVICE_AGENTS_BUILTINS_CRC32C_H_
