#include "device_agents/shm_service.h"

#include <sys/mman.h>

#include <memory>

#include "gtest/gtest.h"

namespace farcall::agent {
namespace {

// A region over anonymous memory, as the service maps a client's memfd.
std::shared_ptr<ShmRegion> MappedRegion(size_t size) {
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  EXPECT_NE(p, MAP_FAILED);
  return std::make_shared<ShmRegion>(static_cast<uint8_t*>(p), size);
}

TEST(ShmRegionTest, WhatADeviceKeepsIsMadeOncePerDeviceAndGoesWhileStillMapped) {
  auto region = MappedRegion(4096);
  int made = 0;
  int a = 0, b = 0;  // two devices' keys
  bool released_while_mapped = false;
  auto pin = [&]() -> absl::StatusOr<std::shared_ptr<void>> {
    ++made;
    uint8_t* data = region->data();
    // Unpinning touches the memory, as a runtime's unregister would: it
    // must run before the unmap.
    return std::shared_ptr<void>(data, [&released_while_mapped](void* p) {
      static_cast<uint8_t*>(p)[0] = 1;
      released_while_mapped = true;
    });
  };
  for (int call = 0; call < 3; ++call) {
    absl::StatusOr<std::shared_ptr<void>> kept = region->KeepWhileMapped(&a, pin);
    ASSERT_TRUE(kept.ok()) << kept.status();
    EXPECT_NE(*kept, nullptr);
  }
  EXPECT_EQ(made, 1);
  ASSERT_TRUE(region->KeepWhileMapped(&b, pin).ok());
  EXPECT_EQ(made, 2);
  region.reset();  // would crash in the deleter if the memory went first
  EXPECT_TRUE(released_while_mapped);
}

TEST(ShmRegionTest, AFailureIsKeptSoThatItIsNotTriedForEveryCall) {
  auto region = MappedRegion(4096);
  int tried = 0;
  auto fail = [&]() -> absl::StatusOr<std::shared_ptr<void>> {
    ++tried;
    return absl::InternalError("cannot pin");
  };
  int key = 0;
  for (int call = 0; call < 3; ++call) {
    EXPECT_EQ(region->KeepWhileMapped(&key, fail).status().message(), "cannot pin");
  }
  EXPECT_EQ(tried, 1);
}

}  // namespace
}  // namespace farcall::agent
