// The device interface: one per platform folder (cpu/, and later cuda/,
// rocm/, oneapi/), chosen in CMake. The agent's call path talks only to this.
//
// Thread safety: a Device is used by one call at a time per stream; the
// agent serialises handler runs per device. DeviceMemory is thread-compatible.
#ifndef FARCALL_DEVICE_AGENTS_DEVICE_H_
#define FARCALL_DEVICE_AGENTS_DEVICE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/platform.h"
#include "farcall/handler_api.h"

namespace farcall::agent {

// One allocation on a device. Freed when destroyed.
class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  // What handlers get: a device pointer (a host pointer on cpu).
  virtual void* device_ptr() = 0;
  // Non-null when the host can write the memory directly (cpu): received
  // chunks then go straight into it, with no staging copy.
  virtual uint8_t* host_ptr() = 0;
  virtual int64_t size() const = 0;
};

class Device {
 public:
  virtual ~Device() = default;
  virtual Platform platform() const = 0;
  virtual int ordinal() const = 0;
  virtual std::string name() const = 0;
  virtual int64_t memory_bytes() const = 0;

  // RESOURCE_EXHAUSTED when the device is out of memory.
  virtual absl::StatusOr<std::unique_ptr<DeviceMemory>> Allocate(int64_t size) = 0;
  // Asynchronous on the device's stream; `host` stays valid until
  // Synchronize() returns.
  virtual absl::Status CopyToDevice(const void* host, DeviceMemory& dst,
                                    int64_t offset, int64_t size) = 0;
  virtual absl::Status CopyToHost(DeviceMemory& src, int64_t offset,
                                  int64_t size, void* host) = 0;
  // Waits for everything enqueued on the stream.
  virtual absl::Status Synchronize() = 0;

  // The stream handlers enqueue their work on (NONE and null on cpu).
  virtual FarcallStreamKind stream_kind() const = 0;
  virtual void* stream() = 0;
};

// A platform's devices and its built-in handlers.
struct Backend {
  std::vector<std::unique_ptr<Device>> devices;
  std::vector<FarcallHandlerDef> builtin_handlers;
};

// Opens the backend of platform `p`. FAILED_PRECONDITION when support for it
// was not built in, or when no device is found (the message says which).
absl::StatusOr<Backend> OpenBackend(Platform p);

}  // namespace farcall::agent

#endif  // FARCALL_DEVICE_AGENTS_DEVICE_H_
