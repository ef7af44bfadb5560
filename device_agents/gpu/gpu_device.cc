// The shared GPU device: see gpu_backend.h.
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/status_macros.h"
#include "device_agents/gpu/gpu_api.h"
#include "device_agents/gpu/gpu_backend.h"
#include "device_agents/gpu/graph_cache.h"
#include "device_agents/memory_pool.h"
#include "device_agents/staging_pool.h"

namespace farcall::agent::FARCALL_GPU_NS {
namespace {

// Sticky errors by device ordinal: once set, the device stays failed.
class StickyErrors {
 public:
  static StickyErrors& Get() {
    static auto* s = new StickyErrors;
    return *s;
  }
  void Set(int ordinal, absl::Status error) {
    absl::MutexLock l(&mu_);
    errors_.emplace(ordinal, std::move(error));  // the first one stays
  }
  absl::Status Find(int ordinal) const {
    absl::MutexLock l(&mu_);
    auto it = errors_.find(ordinal);
    return it == errors_.end() ? absl::OkStatus() : it->second;
  }

 private:
  mutable absl::Mutex mu_;
  std::map<int, absl::Status> errors_ ABSL_GUARDED_BY(mu_);
};

// Every public entry point that touches the runtime first makes the
// device current on the calling thread (cheap when it already is).
#define FARCALL_GPU_SET_DEVICE(ordinal) FARCALL_GPU_RETURN_IF_ERROR(api::SetDevice(ordinal))

class GpuStream;

class GpuStagingBlock final : public StagingBlock {
 public:
  static absl::StatusOr<std::unique_ptr<StagingBlock>> Make(int ordinal, int64_t size) {
    FARCALL_GPU_SET_DEVICE(ordinal);
    void* p = nullptr;
    FARCALL_GPU_RETURN_IF_ERROR(api::HostAlloc(&p, static_cast<size_t>(size)));
    api::EventT event = nullptr;
    const api::Error e = api::EventCreate(&event);
    if (e != api::kSuccess) {
      (void)api::HostFree(p);
      return api::ToStatus(e, "EventCreate");
    }
    return std::unique_ptr<StagingBlock>(new GpuStagingBlock(ordinal, p, size, event));
  }
  ~GpuStagingBlock() override {
    (void)api::SetDevice(ordinal_);
    if (recorded_) (void)api::EventSynchronize(event_);
    (void)api::EventDestroy(event_);
    (void)api::HostFree(data_);
  }
  uint8_t* data() override { return static_cast<uint8_t*>(data_); }
  int64_t size() const override { return size_; }
  absl::Status Record(Stream& stream) override {
    FARCALL_GPU_SET_DEVICE(ordinal_);
    FARCALL_GPU_RETURN_IF_ERROR(
        api::EventRecord(event_, static_cast<api::StreamT>(stream.native())));
    recorded_ = true;
    return absl::OkStatus();
  }
  absl::Status Wait() override {
    if (!recorded_) return absl::OkStatus();
    FARCALL_GPU_SET_DEVICE(ordinal_);
    FARCALL_GPU_RETURN_IF_ERROR(api::EventSynchronize(event_));
    recorded_ = false;
    return absl::OkStatus();
  }

 private:
  GpuStagingBlock(int ordinal, void* data, int64_t size, api::EventT event)
      : ordinal_(ordinal), data_(data), size_(size), event_(event) {}
  int ordinal_;
  void* data_;
  int64_t size_;
  api::EventT event_;
  bool recorded_ = false;
};

class GpuDevice final : public Device {
 public:
  GpuDevice(int ordinal, std::string name, int64_t memory, const BackendOptions& options)
      : ordinal_(ordinal),
        name_(std::move(name)),
        memory_(memory),
        allocator_(absl::StrCat(api::kName, " device ", ordinal),
                   {[ordinal](int64_t n) -> absl::StatusOr<void*> {
                      FARCALL_GPU_SET_DEVICE(ordinal);
                      void* p = nullptr;
                      FARCALL_GPU_RETURN_IF_ERROR(api::Malloc(&p, static_cast<size_t>(n)));
                      return p;
                    },
                    [ordinal](void* p) {
                      (void)api::SetDevice(ordinal);
                      (void)api::Free(p);
                    }},
                   // Keep up to a quarter of the device cached between calls.
                   memory / 4),
        staging_(StagingPool::Create(
            options.staging_bytes, options.staging_block_bytes,
            [ordinal](int64_t n) { return GpuStagingBlock::Make(ordinal, n); })),
        graphs_(*this, options.graph_cache_bytes, options.graph_cache_entries) {}

  ~GpuDevice() override {
    absl::MutexLock l(&mu_);
    (void)api::SetDevice(ordinal_);
    for (api::StreamT s : free_streams_) (void)api::StreamDestroy(s);
  }

  Platform platform() const override { return api::kPlatform; }
  int ordinal() const override { return ordinal_; }
  std::string name() const override { return name_; }
  int64_t memory_bytes() const override { return memory_; }
  int64_t memory_used_bytes() const override {
    return allocator_.in_use_bytes() + allocator_.cached_bytes();
  }

  absl::StatusOr<std::unique_ptr<DeviceMemory>> Allocate(int64_t size) override {
    return allocator_.Allocate(size);
  }
  absl::StatusOr<std::unique_ptr<Stream>> AcquireStream() override;
  std::unique_ptr<StagingBlock> TryAcquireStaging() override { return staging_->TryAcquire(); }
  absl::StatusOr<std::shared_ptr<void>> PinHostMemory(void* p, size_t size) override {
    FARCALL_GPU_SET_DEVICE(ordinal_);
    FARCALL_GPU_RETURN_IF_ERROR(api::HostRegister(p, size));
    const int ordinal = ordinal_;
    return std::shared_ptr<void>(p, [ordinal](void* q) {
      (void)api::SetDevice(ordinal);
      (void)api::HostUnregister(q);
    });
  }
  absl::Status health() const override { return StickyErrors::Get().Find(ordinal_); }

  GraphCache& graphs() { return graphs_; }
  void ReturnStream(api::StreamT s) {
    absl::MutexLock l(&mu_);
    free_streams_.push_back(s);
  }

 private:
  const int ordinal_;
  const std::string name_;
  const int64_t memory_;
  CachingAllocator allocator_;
  std::shared_ptr<StagingPool> staging_;
  GraphCache graphs_;
  absl::Mutex mu_;
  std::vector<api::StreamT> free_streams_ ABSL_GUARDED_BY(mu_);
};

class GpuStream final : public Stream {
 public:
  GpuStream(GpuDevice& device, api::StreamT stream) : device_(device), stream_(stream) {}
  ~GpuStream() override { device_.ReturnStream(stream_); }

  FarcallStreamKind kind() const override { return api::kStreamKind; }
  void* native() override { return stream_; }

  absl::Status CopyToDevice(const void* host, DeviceMemory& dst, int64_t offset,
                            int64_t size) override {
    FARCALL_GPU_SET_DEVICE(device_.ordinal());
    FARCALL_GPU_RETURN_IF_ERROR(api::CopyH2D(static_cast<uint8_t*>(dst.device_ptr()) + offset, host,
                                             static_cast<size_t>(size), stream_));
    return absl::OkStatus();
  }
  absl::Status CopyToHost(DeviceMemory& src, int64_t offset, int64_t size, void* host) override {
    FARCALL_GPU_SET_DEVICE(device_.ordinal());
    FARCALL_GPU_RETURN_IF_ERROR(api::CopyD2H(host,
                                             static_cast<const uint8_t*>(src.device_ptr()) + offset,
                                             static_cast<size_t>(size), stream_));
    return absl::OkStatus();
  }
  absl::Status Invoke(const RegisteredHandler& handler, HandlerInvocation& inv) override {
    FARCALL_GPU_SET_DEVICE(device_.ordinal());
    if ((handler.traits & FARCALL_TRAIT_COMMAND_BUFFER_COMPATIBLE) != 0) {
      return device_.graphs().Run(handler, inv, *this);
    }
    return RunHandler(handler, inv);
  }
  absl::Status Synchronize() override {
    FARCALL_GPU_SET_DEVICE(device_.ordinal());
    FARCALL_GPU_RETURN_IF_ERROR(api::StreamSynchronize(stream_));
    return absl::OkStatus();
  }

 private:
  GpuDevice& device_;
  api::StreamT stream_;
};

absl::StatusOr<std::unique_ptr<Stream>> GpuDevice::AcquireStream() {
  api::StreamT s = nullptr;
  {
    absl::MutexLock l(&mu_);
    if (!free_streams_.empty()) {
      s = free_streams_.back();
      free_streams_.pop_back();
    }
  }
  if (s == nullptr) {
    FARCALL_GPU_SET_DEVICE(ordinal_);
    FARCALL_GPU_RETURN_IF_ERROR(api::StreamCreate(&s));
  }
  return std::make_unique<GpuStream>(*this, s);
}

}  // namespace

absl::Status FARCALL_GPU_ERROR_TO_STATUS(api::Error error, const char* expr) {
  const std::string message =
      absl::StrCat(api::kName, ": ", expr, " failed: ", api::ErrorName(error), " (",
                   api::ErrorString(error), ")");
  if (api::IsOutOfMemory(error)) return absl::ResourceExhaustedError(message);
  if (api::IsNoDevice(error)) return absl::FailedPreconditionError(message);
  absl::Status status = absl::InternalError(message);
  if (api::IsSticky(error)) {
    int ordinal = -1;
    (void)api::GetDevice(&ordinal);
    StickyErrors::Get().Set(
        ordinal, absl::InternalError(absl::StrCat(
                     message, "; the device's context is lost until the agent restarts")));
  }
  return status;
}

absl::StatusOr<Backend> OpenGpuBackend(const BackendOptions& options) {
  int count = 0;
  const api::Error e = api::GetDeviceCount(&count);
  if (e != api::kSuccess || count == 0) {
    const std::string why = e != api::kSuccess
                                ? absl::StrCat(api::ErrorName(e), ": ", api::ErrorString(e))
                                : std::string("the runtime reports 0 devices");
    return absl::FailedPreconditionError(absl::StrCat(
        api::kName, ": no device found (", why, "); this agent cannot serve platform '", api::kName,
        "'. Check that the ", api::kToolkit,
        " driver is installed and the devices are visible to this process."));
  }
  FARCALL_ASSIGN_OR_RETURN(std::vector<int> chosen,
                           SelectDevices(api::kName, count, options.devices));
  Backend backend;
  for (int ordinal : chosen) {
    char name[512] = {};
    int64_t memory = 0;
    FARCALL_GPU_RETURN_IF_ERROR(api::DeviceName(ordinal, name, sizeof(name), &memory));
    backend.devices.push_back(std::make_unique<GpuDevice>(ordinal, name, memory, options));
  }
  for (const FarcallHandlerDef& d : GpuBuiltinHandlers()) {
    backend.builtin_handlers.push_back(d);
  }
  return backend;
}

}  // namespace farcall::agent::FARCALL_GPU_NS
