#include "device_agents/builtins/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <nmmintrin.h>
#define FARCALL_CRC32C_HAVE_SSE42_PATH 1
#endif

namespace farcall::agent::builtins {
namespace {

constexpr uint32_t kPoly = 0x82F63B78u;  // reflected Castagnoli polynomial

using Tables = std::array<std::array<uint32_t, 256>, 8>;

// tables[k][b] is the CRC of byte b followed by k zero bytes, which lets the
// loop below fold 8 input bytes with 8 independent lookups.
constexpr Tables MakeTables() {
  Tables t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t c = b;
    for (int i = 0; i < 8; ++i) c = (c >> 1) ^ ((c & 1u) ? kPoly : 0u);
    t[0][b] = c;
  }
  for (int k = 1; k < 8; ++k) {
    for (uint32_t b = 0; b < 256; ++b) {
      t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xFFu];
    }
  }
  return t;
}

constexpr Tables kTables = MakeTables();

// Both cores work on the raw (un-inverted) register.
uint32_t PortableCore(uint32_t c, const unsigned char* p, size_t n) {
  while (n >= 8) {
    // memcpy: the input may be unaligned; the loads assume little-endian,
    // which every platform farcall runs on is.
    uint32_t lo, hi;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + 4, 4);
    lo ^= c;
    c = kTables[7][lo & 0xFF] ^ kTables[6][(lo >> 8) & 0xFF] ^ kTables[5][(lo >> 16) & 0xFF] ^
        kTables[4][lo >> 24] ^ kTables[3][hi & 0xFF] ^ kTables[2][(hi >> 8) & 0xFF] ^
        kTables[1][(hi >> 16) & 0xFF] ^ kTables[0][hi >> 24];
    p += 8;
    n -= 8;
  }
  while (n-- > 0) c = (c >> 8) ^ kTables[0][(c ^ *p++) & 0xFFu];
  return c;
}

#ifdef FARCALL_CRC32C_HAVE_SSE42_PATH
// Compiled for SSE4.2 on its own, so the binary still runs on CPUs without
// it; only called after the runtime check below.
__attribute__((target("sse4.2"))) uint32_t HardwareCore(uint32_t c, const unsigned char* p,
                                                        size_t n) {
#if defined(__x86_64__)
  uint64_t c64 = c;
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c64 = _mm_crc32_u64(c64, v);
    p += 8;
    n -= 8;
  }
  c = static_cast<uint32_t>(c64);
#endif
  while (n >= 4) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    c = _mm_crc32_u32(c, v);
    p += 4;
    n -= 4;
  }
  while (n-- > 0) c = _mm_crc32_u8(c, *p++);
  return c;
}

bool HasSse42() {
  static const bool has = __builtin_cpu_supports("sse4.2");
  return has;
}
#endif

}  // namespace

uint32_t Crc32c(const void* data, size_t n, uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(data);
#ifdef FARCALL_CRC32C_HAVE_SSE42_PATH
  if (HasSse42()) return ~HardwareCore(~crc, p, n);
#endif
  return ~PortableCore(~crc, p, n);
}

uint32_t Crc32cPortableForTest(const void* data, size_t n, uint32_t crc) {
  return ~PortableCore(~crc, static_cast<const unsigned char*>(data), n);
}

bool Crc32cUsesHardwareForTest() {
#ifdef FARCALL_CRC32C_HAVE_SSE42_PATH
  return HasSse42();
#else
  return false;
#endif
}

}  // namespace farcall::agent::builtins
