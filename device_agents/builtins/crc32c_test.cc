#include "device_agents/builtins/crc32c.h"

#include <cstdint>
#include <cstring>
#include <random>
#include <string_view>
#include <vector>

#include "gtest/gtest.h"

namespace farcall::agent::builtins {
namespace {

uint32_t Crc(std::string_view s) { return Crc32c(s.data(), s.size()); }

TEST(Crc32cTest, KnownVectors) {
  EXPECT_EQ(Crc(""), 0u);
  EXPECT_EQ(Crc("a"), 0xC1D04330u);
  EXPECT_EQ(Crc("123456789"), 0xE3069283u);
  EXPECT_EQ(Crc32cPortableForTest("123456789", 9), 0xE3069283u);

  // RFC 3720 (iSCSI), appendix B.4.
  std::vector<unsigned char> buf(32, 0x00);
  EXPECT_EQ(Crc32c(buf.data(), buf.size()), 0x8A9136AAu);
  std::memset(buf.data(), 0xFF, buf.size());
  EXPECT_EQ(Crc32c(buf.data(), buf.size()), 0x62A8AB43u);
  for (int i = 0; i < 32; ++i) buf[i] = static_cast<unsigned char>(i);
  EXPECT_EQ(Crc32c(buf.data(), buf.size()), 0x46DD794Eu);
  EXPECT_EQ(Crc32cPortableForTest(buf.data(), buf.size()), 0x46DD794Eu);
  for (int i = 0; i < 32; ++i) buf[i] = static_cast<unsigned char>(31 - i);
  EXPECT_EQ(Crc32c(buf.data(), buf.size()), 0x113FDB5Cu);
}

TEST(Crc32cTest, Extends) {
  const std::string_view s = "123456789";
  for (size_t split = 0; split <= s.size(); ++split) {
    const uint32_t head = Crc32c(s.data(), split);
    EXPECT_EQ(Crc32c(s.data() + split, s.size() - split, head), 0xE3069283u);
    const uint32_t phead = Crc32cPortableForTest(s.data(), split);
    EXPECT_EQ(Crc32cPortableForTest(s.data() + split, s.size() - split, phead), 0xE3069283u);
  }
}

// Both implementations on odd sizes and every alignment. On a machine
// without SSE4.2 Crc32c is the portable one and this checks nothing new.
TEST(Crc32cTest, HardwareAndPortableAgree) {
  if (!Crc32cUsesHardwareForTest()) {
    GTEST_LOG_(INFO) << "no SSE4.2 here: only the portable path runs";
  }
  std::mt19937 rng(42);
  std::vector<unsigned char> data(4096 + 16);
  for (unsigned char& b : data) b = static_cast<unsigned char>(rng());
  for (size_t offset = 0; offset < 16; ++offset) {
    for (size_t n : {0, 1, 3, 7, 8, 9, 15, 17, 31, 63, 255, 1001, 4095}) {
      ASSERT_EQ(Crc32c(data.data() + offset, n), Crc32cPortableForTest(data.data() + offset, n))
          << "offset " << offset << " n " << n;
      ASSERT_EQ(Crc32c(data.data() + offset, n, 0x12345678u),
                Crc32cPortableForTest(data.data() + offset, n, 0x12345678u))
          << "offset " << offset << " n " << n;
    }
  }
}

}  // namespace
}  // namespace farcall::agent::builtins
