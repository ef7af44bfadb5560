#include "device_agents/staging_pool.h"

#include <memory>
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

}  // namespace
}  // namespace farcall::agent
