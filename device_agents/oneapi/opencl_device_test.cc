// The oneapi backend's device, on whatever OpenCL device is here (PoCL's
// CPU device in CI). Without one the tests skip, saying so.
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <vector>

#include "device_agents/oneapi/oneapi_backend.h"
#include "gtest/gtest.h"

namespace farcall::agent::oneapi {
namespace {

#define OPEN_OR_SKIP(backend)                                               \
  absl::StatusOr<Backend> backend = OpenOneapiBackend(BackendOptions{});    \
  if (!backend.ok()) {                                                      \
    GTEST_SKIP() << "SKIPPED: no OpenCL device here: " << backend.status(); \
  }

bool HostUnified(Device& d) {
  // The device answers WrapHostMemory exactly when it shares the host's
  // memory; ask OpenCL the same question.
  cl_command_queue q = nullptr;
  absl::StatusOr<std::unique_ptr<Stream>> s = d.AcquireStream();
  if (!s.ok()) return false;
  q = static_cast<cl_command_queue>((*s)->native());
  cl_device_id id = nullptr;
  clGetCommandQueueInfo(q, CL_QUEUE_DEVICE, sizeof(id), &id, nullptr);
  cl_bool unified = CL_FALSE;
  clGetDeviceInfo(id, CL_DEVICE_HOST_UNIFIED_MEMORY, sizeof(unified), &unified, nullptr);
  return unified == CL_TRUE;
}

// A tensor in host memory (a client's shared-memory region) is used in
// place: the device reads the host's bytes without a copy in, and what it
// writes (a fill on the device's queue) shows in those bytes once read back
// into themselves.
TEST(OpenClDeviceTest, HostMemoryIsUsedInPlaceWhereTheDeviceSharesIt) {
  OPEN_OR_SKIP(backend);
  Device& device = *backend->devices[0];
  if (!HostUnified(device)) {
    absl::StatusOr<std::unique_ptr<DeviceMemory>> none = device.WrapHostMemory(nullptr, 64);
    ASSERT_TRUE(none.ok()) << none.status();
    EXPECT_EQ(*none, nullptr) << "a device without host-unified memory copies instead";
    GTEST_SKIP() << "SKIPPED: " << device.name() << " does not share the host's memory";
  }
  constexpr int64_t kBytes = (int64_t{1} << 20) + 12;
  std::vector<uint8_t> region(kBytes);
  std::iota(region.begin(), region.end(), 7);
  const std::vector<uint8_t> written = region;

  absl::StatusOr<std::unique_ptr<DeviceMemory>> wrapped =
      device.WrapHostMemory(region.data(), kBytes);
  ASSERT_TRUE(wrapped.ok()) << wrapped.status();
  ASSERT_NE(*wrapped, nullptr);
  EXPECT_EQ((*wrapped)->host_ptr(), nullptr) << "not for direct writes while the device has it";
  EXPECT_EQ((*wrapped)->size(), kBytes);
  absl::StatusOr<std::unique_ptr<Stream>> stream = device.AcquireStream();
  ASSERT_TRUE(stream.ok()) << stream.status();

  // The device reads the host's bytes.
  std::vector<uint8_t> seen(kBytes, 0);
  ASSERT_TRUE((*stream)->CopyToHost(**wrapped, 0, kBytes, seen.data()).ok());
  ASSERT_TRUE((*stream)->Synchronize().ok());
  EXPECT_EQ(seen, written);

  // The device writes; reading the buffer back into its own bytes makes
  // the writes visible there.
  const uint8_t pattern = 0xA5;
  cl_mem mem = static_cast<cl_mem>((*wrapped)->device_ptr());
  ASSERT_EQ(clEnqueueFillBuffer(static_cast<cl_command_queue>((*stream)->native()), mem, &pattern,
                                1, 4096, 8192, 0, nullptr, nullptr),
            CL_SUCCESS);
  ASSERT_TRUE((*stream)->CopyToHost(**wrapped, 0, kBytes, region.data()).ok());
  ASSERT_TRUE((*stream)->Synchronize().ok());
  for (int64_t i = 0; i < kBytes; ++i) {
    const uint8_t want = i >= 4096 && i < 4096 + 8192 ? pattern : written[i];
    ASSERT_EQ(region[i], want) << "byte " << i;
  }
  wrapped->reset();  // the buffer goes before the bytes it wraps
}

TEST(OpenClDeviceTest, NothingToWrapGivesNoBuffer) {
  OPEN_OR_SKIP(backend);
  uint8_t byte = 0;
  absl::StatusOr<std::unique_ptr<DeviceMemory>> empty =
      backend->devices[0]->WrapHostMemory(&byte, 0);
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(*empty, nullptr);  // a zero-byte tensor gets the device's own memory
}

}  // namespace
}  // namespace farcall::agent::oneapi
