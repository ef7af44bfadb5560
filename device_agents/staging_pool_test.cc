#include "device_agents/staging_pool.h"

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace farcall::agent {
namespace {

// A block whose "copies" are pending until Wait() is called.
class FakeBlock final : public StagingBlock {
 public:
  FakeBlock(int64_t size, int* waits) : data_(size), waits_(waits) {}
  uint8_t* data() override { return data_.data(); }
  int64_t size() const override { return static_cast<int64_t>(data_.size()); }
  absl::Status Record(Stream&) override {
    pending_ = true;
    return absl::OkStatus();
  }
  absl::Status Wait() override {
    if (pending_) ++*waits_;
    pending_ = false;
    return absl::OkStatus();
  }

 private:
  std::vector<uint8_t> data_;
  int* waits_;
  bool pending_ = false;
};

class NullStream final : public Stream {
 public:
  FarcallStreamKind kind() const override { return FARCALL_STREAM_NONE; }
  void* native() override { return nullptr; }
  absl::Status CopyToDevice(const void*, DeviceMemory&, int64_t, int64_t) override {
    return absl::OkStatus();
  }
  absl::Status CopyToHost(DeviceMemory&, int64_t, int64_t, void*) override {
    return absl::OkStatus();
  }
  absl::Status Synchronize() override { return absl::OkStatus(); }
};

TEST(StagingPoolTest, HandsOutAtMostItsBlocksAndTakesThemBack) {
  int made = 0, waits = 0;
  auto pool = StagingPool::Create(3 << 20, 1 << 20, [&](int64_t n) {
    ++made;
    return absl::StatusOr<std::unique_ptr<StagingBlock>>(std::make_unique<FakeBlock>(n, &waits));
  });
  EXPECT_EQ(pool->capacity(), 3);
  std::vector<std::unique_ptr<StagingBlock>> held;
  for (int i = 0; i < 3; ++i) {
    held.push_back(pool->TryAcquire());
    ASSERT_NE(held.back(), nullptr);
    EXPECT_EQ(held.back()->size(), 1 << 20);
  }
  EXPECT_EQ(pool->TryAcquire(), nullptr);  // bounded
  EXPECT_EQ(pool->free_blocks(), 0);
  held.pop_back();
  EXPECT_EQ(pool->free_blocks(), 1);
  EXPECT_NE(pool->TryAcquire(), nullptr);
  EXPECT_EQ(made, 3);  // made once, then reused
}

TEST(StagingPoolTest, AReusedBlockWaitsForItsLastCopyFirst) {
  int waits = 0;
  auto pool = StagingPool::Create(1 << 20, 1 << 20, [&](int64_t n) {
    return absl::StatusOr<std::unique_ptr<StagingBlock>>(std::make_unique<FakeBlock>(n, &waits));
  });
  NullStream stream;
  {
    auto b = pool->TryAcquire();
    ASSERT_TRUE(b->Record(stream).ok());
  }  // returned with a copy still "running"
  EXPECT_EQ(waits, 0);
  auto again = pool->TryAcquire();
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(waits, 1);
}

TEST(StagingPoolTest, BlocksOutliveThePoolsLastOwner) {
  int waits = 0;
  auto pool = StagingPool::Create(1 << 20, 1 << 20, [&](int64_t n) {
    return absl::StatusOr<std::unique_ptr<StagingBlock>>(std::make_unique<FakeBlock>(n, &waits));
  });
  auto b = pool->TryAcquire();
  pool.reset();  // gRPC may hold a result block after the device is gone
  b->data()[0] = 1;
  b.reset();
}

TEST(StagingPoolTest, FailedPinningIsNoBlockAndNoLeak) {
  auto pool = StagingPool::Create(2 << 20, 1 << 20, [](int64_t) {
    return absl::StatusOr<std::unique_ptr<StagingBlock>>(
        absl::ResourceExhaustedError("cannot pin"));
  });
  EXPECT_EQ(pool->TryAcquire(), nullptr);
  EXPECT_EQ(pool->free_blocks(), 2);
}

// A block whose bytes the holder writes and checks: two holders at once
// would see each other's writes.
class OwnedBlock final : public StagingBlock {
 public:
  explicit OwnedBlock(int64_t size) : data_(size) {}
  uint8_t* data() override { return data_.data(); }
  int64_t size() const override { return static_cast<int64_t>(data_.size()); }
  absl::Status Record(Stream&) override { return absl::OkStatus(); }
  absl::Status Wait() override { return absl::OkStatus(); }

 private:
  std::vector<uint8_t> data_;
};

TEST(StagingPoolTest, ThreadsTakingAndReturningBlocksNeverShareOne) {
  std::atomic<int> made{0};
  auto pool = StagingPool::Create(4 * 4096, 4096, [&](int64_t n) {
    ++made;
    return absl::StatusOr<std::unique_ptr<StagingBlock>>(std::make_unique<OwnedBlock>(n));
  });
  std::atomic<int> shared{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 2000; ++i) {
        std::unique_ptr<StagingBlock> b = pool->TryAcquire();
        if (b == nullptr) continue;  // all out: the caller would use its own
        const auto mark = static_cast<uint8_t>(t + 1);
        for (int j = 0; j < 64; ++j) b->data()[j] = mark;
        for (int j = 0; j < 64; ++j) {
          if (b->data()[j] != mark) ++shared;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(shared.load(), 0);
  EXPECT_LE(made.load(), 4);
  EXPECT_EQ(pool->free_blocks(), 4);
}

}  // namespace
}  // namespace farcall::agent
