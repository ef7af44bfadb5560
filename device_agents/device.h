// The device interface: one implementation per platform folder (cpu/,
// cuda/, rocm/, oneapi/), chosen in CMake. The agent's call path talks only
// to this.
//
// A call takes one Stream for its whole life: its input copies, its handler
// and its result copies are enqueued there in order, so calls never see each
// other's work, and a graph capture records only its own call.
//
// Thread safety: Device is thread-safe. A Stream, a StagingBlock and a
// DeviceMemory are used by one call at a time.
#ifndef FARCALL_DEVICE_AGENTS_DEVICE_H_
#define FARCALL_DEVICE_AGENTS_DEVICE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/platform.h"
#include "device_agents/handler_registry.h"
#include "device_agents/handler_runtime.h"
#include "farcall/handler_api.h"

namespace farcall::agent {

// One allocation on a device; returned to the device's pool when destroyed.
class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  // What handlers get: a device pointer (a host pointer on cpu, a cl_mem on
  // oneapi).
  virtual void* device_ptr() = 0;
  // Non-null when the host can write the memory directly (cpu): received
  // chunks then go straight into it, with no staging copy.
  virtual uint8_t* host_ptr() = 0;
  virtual int64_t size() const = 0;
};

class Stream;

// Pinned host memory from the device's bounded staging pool, that copies to
// and from the device run from asynchronously. It remembers the last copy
// that used it; returned to the pool when destroyed.
class StagingBlock {
 public:
  virtual ~StagingBlock() = default;
  virtual uint8_t* data() = 0;
  virtual int64_t size() const = 0;
  // Marks the work enqueued on `stream` so far as this block's last use.
  virtual absl::Status Record(Stream& stream) = 0;
  // Waits for that work: after it the block's bytes may be read or reused.
  virtual absl::Status Wait() = 0;
};

// One in-order queue of device work (cudaStream_t, hipStream_t,
// cl_command_queue), held by one call at a time.
class Stream {
 public:
  virtual ~Stream() = default;
  virtual FarcallStreamKind kind() const = 0;
  virtual void* native() = 0;
  // Asynchronous: `host` must stay valid, and unchanged, until the copy is
  // done (a StagingBlock recorded after it, or Synchronize()).
  virtual absl::Status CopyToDevice(const void* host, DeviceMemory& dst, int64_t offset,
                                    int64_t size) = 0;
  virtual absl::Status CopyToHost(DeviceMemory& src, int64_t offset, int64_t size, void* host) = 0;
  // Runs a handler whose work goes on this stream. On CUDA and ROCm a
  // command-buffer-compatible handler is captured once per signature and
  // replayed after; elsewhere the handler's host code simply runs.
  virtual absl::Status Invoke(const RegisteredHandler& handler, HandlerInvocation& inv) {
    return RunHandler(handler, inv);
  }
  // Waits for everything enqueued.
  virtual absl::Status Synchronize() = 0;
};

class Device {
 public:
  virtual ~Device() = default;
  virtual Platform platform() const = 0;
  virtual int ordinal() const = 0;
  virtual std::string name() const = 0;
  virtual int64_t memory_bytes() const = 0;
  // Device memory the agent holds now: tensors of calls in flight, and the
  // blocks its caching allocator keeps for the next calls.
  virtual int64_t memory_used_bytes() const = 0;

  // From the device's caching pool; RESOURCE_EXHAUSTED when the device is
  // out of memory even after the pool gave its cached blocks back.
  virtual absl::StatusOr<std::unique_ptr<DeviceMemory>> Allocate(int64_t size) = 0;
  // A stream for one call.
  virtual absl::StatusOr<std::unique_ptr<Stream>> AcquireStream() = 0;
  // A free staging block, or null when the pool is empty (the caller then
  // uses what it holds, or plain memory). Null always on host-memory
  // devices, which need no staging.
  virtual std::unique_ptr<StagingBlock> TryAcquireStaging() { return nullptr; }
  // Pins host memory the process already has (a client's shared-memory
  // region), so that copies between it and the device go as DMA, without
  // the runtime staging them: a holder that unpins it when destroyed (before
  // the memory goes). Null where nothing needs pinning (cpu, oneapi); an
  // error where pinning failed (the copies then work all the same, staged).
  virtual absl::StatusOr<std::shared_ptr<void>> PinHostMemory(void* p, size_t size) {
    return std::shared_ptr<void>();
  }
  // Device memory that is `size` bytes of host memory the process has (a
  // tensor inside a client's region), used by the device in place: no copy
  // in, and a copy out to `p` itself only makes the device's writes visible
  // there. Null where the device does not share the host's memory (the call
  // then copies into memory of its own); an error where it should have
  // worked (counted as a staging fallback; the call copies all the same).
  // oneapi on a device with host-unified memory (PoCL, integrated GPUs):
  // an OpenCL buffer over the bytes (CL_MEM_USE_HOST_PTR).
  virtual absl::StatusOr<std::unique_ptr<DeviceMemory>> WrapHostMemory(uint8_t* p, int64_t size) {
    return std::unique_ptr<DeviceMemory>();
  }

  // OK, or the sticky error after which this device can no longer run
  // anything (an illegal address, a failed launch): the agent then reports
  // NOT_SERVING.
  virtual absl::Status health() const { return absl::OkStatus(); }

  // Calls holding this device now; the agent gives a new call the least
  // busy device.
  std::atomic<int> active_calls{0};
};

// A platform's devices and its built-in handlers.
struct Backend {
  std::vector<std::unique_ptr<Device>> devices;
  std::vector<FarcallHandlerDef> builtin_handlers;
};

// Which devices to open: empty means all of them.
struct BackendOptions {
  std::vector<int> devices;
  // Pinned staging memory per device, in bytes, and the size of one block.
  int64_t staging_bytes = int64_t{256} << 20;
  int64_t staging_block_bytes = int64_t{4} << 20;
  // Device memory the captured graphs of command-buffer-compatible handlers
  // may hold per device (cuda, rocm).
  int64_t graph_cache_bytes = int64_t{1} << 30;
  int64_t graph_cache_entries = 1024;
};

// Opens the backend of platform `p`. FAILED_PRECONDITION when support for it
// was not built in, or when no device is found (the message names the
// platform and says so); INVALID_ARGUMENT for a --devices ordinal that does
// not exist.
absl::StatusOr<Backend> OpenBackend(Platform p, const BackendOptions& options);

// The devices of `count` that `wanted` selects (all when empty), or
// INVALID_ARGUMENT naming the first ordinal out of range or repeated.
absl::StatusOr<std::vector<int>> SelectDevices(absl::string_view platform, int count,
                                               const std::vector<int>& wanted);

}  // namespace farcall::agent

#endif  // FARCALL_DEVICE_AGENTS_DEVICE_H_
