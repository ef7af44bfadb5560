#include "device_agents/cpu/cpu_device.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <new>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/cgroup_limits.h"
#include "core/status_macros.h"
#include "device_agents/cpu/builtin_handlers.h"
#include "device_agents/memory_pool.h"

namespace farcall::agent::cpu {
namespace {

// Cache-line alignment suits every dtype and vectorised loops.
constexpr size_t kAlignment = 64;

class HostMemory final : public DeviceMemory {
 public:
  HostMemory(uint8_t* data, int64_t size, std::atomic<int64_t>& held)
      : data_(data), size_(size), held_(held) {
    held_ += size_;
  }
  ~HostMemory() override {
    std::free(data_);
    held_ -= size_;
  }
  void* device_ptr() override { return data_; }
  uint8_t* host_ptr() override { return data_; }
  int64_t size() const override { return size_; }

 private:
  uint8_t* data_;
  int64_t size_;
  std::atomic<int64_t>& held_;
};

std::string CpuModelName() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  }
  return "host CPU";
}

// Handlers run synchronously on the worker, so the "stream" is the thread:
// copies happen at once and there is nothing to wait for.
class CpuStream final : public Stream {
 public:
  FarcallStreamKind kind() const override { return FARCALL_STREAM_NONE; }
  void* native() override { return nullptr; }
  absl::Status CopyToDevice(const void* host, DeviceMemory& dst, int64_t offset,
                            int64_t size) override {
    std::memcpy(dst.host_ptr() + offset, host, size);
    return absl::OkStatus();
  }
  absl::Status CopyToHost(DeviceMemory& src, int64_t offset, int64_t size, void* host) override {
    std::memcpy(host, src.host_ptr() + offset, size);
    return absl::OkStatus();
  }
  absl::Status Synchronize() override { return absl::OkStatus(); }
};

class CpuDevice final : public Device {
 public:
  Platform platform() const override { return Platform::kCpu; }
  int ordinal() const override { return 0; }
  std::string name() const override { return name_; }
  int64_t memory_bytes() const override {
    return static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
  }

  absl::StatusOr<std::unique_ptr<DeviceMemory>> Allocate(int64_t size) override {
    // Large tensors come from a cache of freed blocks: a fresh 256 MiB
    // block costs about 80 ms of page faults here before its first byte
    // arrives; a reused one costs nothing. Small ones from malloc, which
    // keeps its own.
    if (size >= kCachedFrom) return large_.Allocate(size);
    // Round up: aligned_alloc wants a multiple of the alignment. Memory is
    // left uninitialised; every byte is written by a chunk or a handler.
    size_t bytes = (static_cast<size_t>(size) + kAlignment - 1) / kAlignment * kAlignment;
    if (bytes == 0) bytes = kAlignment;
    void* p = std::aligned_alloc(kAlignment, bytes);
    if (p == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("cpu: out of host memory allocating ", size, " bytes."));
    }
    return std::make_unique<HostMemory>(static_cast<uint8_t*>(p), size, held_);
  }
  int64_t memory_used_bytes() const override { return held_.load() + large_.in_use_bytes(); }
  absl::StatusOr<std::unique_ptr<Stream>> AcquireStream() override;

 private:
  std::string name_ = CpuModelName();
  std::atomic<int64_t> held_{0};  // outlives every HostMemory (the agent's last)
  static constexpr int64_t kCachedFrom = int64_t{1} << 20;
  // At most 1 GiB of freed blocks, or a sixteenth of the memory this
  // process may use, kept for reuse.
  CachingAllocator large_{"cpu",
                          {[](int64_t n) -> absl::StatusOr<void*> {
                             void* p = std::aligned_alloc(kAlignment, static_cast<size_t>(n));
                             if (p == nullptr) {
                               return absl::ResourceExhaustedError(absl::StrCat(
                                   "cpu: out of host memory allocating ", n, " bytes."));
                             }
                             return p;
                           },
                           [](void* p) { std::free(p); }, /*host=*/true},
                          std::min<int64_t>(int64_t{1} << 30, MemoryLimitBytes() / 16)};
};

absl::StatusOr<std::unique_ptr<Stream>> CpuDevice::AcquireStream() {
  return std::make_unique<CpuStream>();
}

}  // namespace

absl::StatusOr<Backend> OpenCpuBackend(const BackendOptions& options) {
  // The host is one device; --devices may name only it.
  FARCALL_ASSIGN_OR_RETURN(std::vector<int> chosen, SelectDevices("cpu", 1, options.devices));
  (void)chosen;
  Backend b;
  b.devices.push_back(std::make_unique<CpuDevice>());
  for (const FarcallHandlerDef& d : BuiltinHandlers()) b.builtin_handlers.push_back(d);
  return b;
}

}  // namespace farcall::agent::cpu
