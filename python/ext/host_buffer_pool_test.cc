#include "python/ext/host_buffer_pool.h"

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace farcall::python {
namespace {

// malloc and free, counted.
struct Counted {
  int live = 0;
  HostBufferPool Pool(size_t max_cached) {
    return HostBufferPool(
        [this](size_t bytes) -> absl::StatusOr<void*> {
          ++live;
          return std::malloc(bytes);
        },
        [this](void* p) {
          --live;
          std::free(p);
        },
        max_cached);
  }
};

TEST(HostBufferPoolTest, ABufferReturnedIsTheNextCallsOfItsClass) {
  Counted c;
  {
    HostBufferPool pool = c.Pool(size_t{1} << 30);
    void* first = nullptr;
    {
      absl::StatusOr<HostBufferPool::Lease> a = pool.Take(100 << 10);
      ASSERT_TRUE(a.ok());
      first = a->data();
    }
    EXPECT_EQ(pool.cached_bytes(), HostBufferPool::SizeClass(100 << 10));
    absl::StatusOr<HostBufferPool::Lease> b = pool.Take(120 << 10);  // same class: 128 KiB
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(b->data(), first);
    EXPECT_EQ(pool.allocations(), 1);
    absl::StatusOr<HostBufferPool::Lease> other = pool.Take(1 << 20);  // another class
    ASSERT_TRUE(other.ok());
    EXPECT_NE(other->data(), first);
    EXPECT_EQ(pool.allocations(), 2);
    EXPECT_EQ(c.live, 2);
  }
  EXPECT_EQ(c.live, 0);  // the pool freed what it cached
}

TEST(HostBufferPoolTest, SizeClassesArePowersOfTwoFrom64KiB) {
  EXPECT_EQ(HostBufferPool::SizeClass(1), size_t{64} << 10);
  EXPECT_EQ(HostBufferPool::SizeClass(64 << 10), size_t{64} << 10);
  EXPECT_EQ(HostBufferPool::SizeClass((64 << 10) + 1), size_t{128} << 10);
  EXPECT_EQ(HostBufferPool::SizeClass(size_t{256} << 20), size_t{256} << 20);
}

TEST(HostBufferPoolTest, PastTheCacheBoundReturnedBuffersAreFreed) {
  Counted c;
  HostBufferPool pool = c.Pool(size_t{128} << 10);  // two 64 KiB buffers at most
  {
    std::vector<HostBufferPool::Lease> leases;
    for (int i = 0; i < 4; ++i) leases.push_back(*pool.Take(1000));
    EXPECT_EQ(c.live, 4);
  }
  EXPECT_EQ(pool.cached_bytes(), size_t{128} << 10);
  EXPECT_EQ(c.live, 2);
}

TEST(HostBufferPoolTest, NothingIsAllocatedForZeroBytesAndAFailureIsReported) {
  int calls = 0;
  HostBufferPool pool(
      [&](size_t) -> absl::StatusOr<void*> {
        ++calls;
        return absl::ResourceExhaustedError("out of pinned memory");
      },
      [](void*) {}, 1 << 20);
  absl::StatusOr<HostBufferPool::Lease> none = pool.Take(0);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->data(), nullptr);
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(pool.Take(10).status().message(), "out of pinned memory");
}

TEST(HostBufferPoolTest, ConcurrentCallersNeverShareABuffer) {
  Counted c;
  HostBufferPool pool = c.Pool(size_t{64} << 20);
  std::vector<std::thread> threads;
  std::atomic<int> shared{0};
  std::mutex mu;
  std::set<void*> in_use;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 500; ++i) {
        absl::StatusOr<HostBufferPool::Lease> l = pool.Take(70 << 10);
        ASSERT_TRUE(l.ok());
        {
          std::lock_guard<std::mutex> g(mu);
          if (!in_use.insert(l->data()).second) ++shared;
        }
        std::lock_guard<std::mutex> g(mu);
        in_use.erase(l->data());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(shared.load(), 0);
  EXPECT_LE(pool.allocations(), 4);
}

}  // namespace
}  // namespace farcall::python
