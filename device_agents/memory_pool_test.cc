#include "device_agents/memory_pool.h"

#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace farcall::agent {
namespace {

using ::testing::HasSubstr;

// A fake device with `capacity` bytes, counting raw allocations.
struct FakeDevice {
  int64_t capacity;
  int64_t used = 0;
  int allocations = 0;
  std::set<void*> live;

  CachingAllocator::RawOps Ops() {
    return {[this](int64_t n) -> absl::StatusOr<void*> {
              if (used + n > capacity) return absl::ResourceExhaustedError("fake: out of memory");
              void* p = std::malloc(n);
              used += n;
              ++allocations;
              live.insert(p);
              sizes[p] = n;
              return p;
            },
            [this](void* p) {
              used -= sizes[p];
              live.erase(p);
              std::free(p);
            }};
  }
  std::map<void*, int64_t> sizes;
};

TEST(CachingAllocatorTest, RoundsSizesSoNearbySizesShareBlocks) {
  EXPECT_EQ(CachingAllocator::RoundSize(1), 512);
  EXPECT_EQ(CachingAllocator::RoundSize(513), 1024);
  EXPECT_EQ(CachingAllocator::RoundSize(1 << 20), 1 << 20);
  EXPECT_EQ(CachingAllocator::RoundSize((1 << 20) + 1), 2 << 20);
  EXPECT_EQ(CachingAllocator::RoundSize((5 << 20) + 7), 6 << 20);
}

TEST(CachingAllocatorTest, FreedBlocksAreReusedWithoutAnotherDeviceAllocation) {
  FakeDevice dev{64 << 20};
  CachingAllocator a("fake device 0", dev.Ops(), 32 << 20);
  void* first = nullptr;
  {
    auto m = a.Allocate(3 << 20);
    ASSERT_TRUE(m.ok()) << m.status();
    first = (*m)->device_ptr();
    EXPECT_EQ((*m)->size(), 3 << 20);
    EXPECT_EQ((*m)->host_ptr(), nullptr);
    EXPECT_EQ(a.in_use_bytes(), 4 << 20);
  }
  EXPECT_EQ(a.cached_bytes(), 4 << 20);
  auto again = a.Allocate((3 << 20) + 100);  // rounds to the same 4 MiB
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->device_ptr(), first);
  EXPECT_EQ(dev.allocations, 1);
  // A much smaller call does not take the big block.
  auto small = a.Allocate(1000);
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(dev.allocations, 2);
}

TEST(CachingAllocatorTest, OutOfMemoryGivesTheCacheBackThenSaysResourceExhausted) {
  FakeDevice dev{8 << 20};
  CachingAllocator a("fake device 0", dev.Ops(), 8 << 20);
  {
    auto m = a.Allocate(6 << 20);
    ASSERT_TRUE(m.ok());
  }
  EXPECT_EQ(a.cached_bytes(), 6 << 20);
  // 4 MiB fits only once the cached 6 MiB block is freed.
  auto m = a.Allocate(4 << 20);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(a.cached_bytes(), 0);
  auto too_big = a.Allocate(6 << 20);
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(too_big.status().message(),
              HasSubstr("fake device 0 is out of memory: allocating 6291456 bytes with "
                        "4194304 bytes in use by calls"));
}

TEST(CachingAllocatorTest, KeepsNoMoreThanItsCacheLimitAndFreesAllAtTheEnd) {
  FakeDevice dev{64 << 20};
  {
    CachingAllocator a("fake device 0", dev.Ops(), 4 << 20);
    {
      auto x = a.Allocate(4 << 20);
      auto y = a.Allocate(4 << 20);
      ASSERT_TRUE(x.ok() && y.ok());
    }
    EXPECT_EQ(a.cached_bytes(), 4 << 20);  // the second block went back
    EXPECT_EQ(dev.live.size(), 1u);
  }
  EXPECT_TRUE(dev.live.empty());
}

TEST(CachingAllocatorTest, ThreadsAllocatingAndFreeingAtOnceGiveEveryByteBack) {
  std::mutex mu;  // the fake device's own state
  FakeDevice dev{int64_t{1} << 30};
  CachingAllocator::RawOps raw = dev.Ops();
  CachingAllocator::RawOps locked{[&](int64_t n) {
                                    std::lock_guard<std::mutex> l(mu);
                                    return raw.allocate(n);
                                  },
                                  [&](void* p) {
                                    std::lock_guard<std::mutex> l(mu);
                                    raw.free(p);
                                  }};
  {
    CachingAllocator a("fake device 0", locked, 8 << 20);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        std::mt19937 rng(t);
        for (int i = 0; i < 500; ++i) {
          auto m = a.Allocate(512 * (1 + static_cast<int64_t>(rng() % 64)));
          ASSERT_TRUE(m.ok()) << m.status();
          static_cast<char*>((*m)->device_ptr())[0] = static_cast<char>(t);
        }
      });
    }
    for (auto& t : threads) t.join();
    EXPECT_EQ(a.in_use_bytes(), 0);
  }
  EXPECT_EQ(dev.used, 0);  // the cache was given back at the end
  EXPECT_TRUE(dev.live.empty());
}

}  // namespace
}  // namespace farcall::agent
