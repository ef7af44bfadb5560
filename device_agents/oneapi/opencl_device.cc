// OpenCL devices, queues, buffers and pinned staging for the oneapi agent.
#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/status_macros.h"
#include "device_agents/memory_pool.h"
#include "device_agents/oneapi/oneapi_backend.h"
#include "device_agents/staging_pool.h"

namespace farcall::agent::oneapi {

extern const char kBuiltinKernelsSource[];  // builtin_kernels.cl, embedded

namespace {

std::string DeviceString(cl_device_id d, cl_device_info what) {
  size_t size = 0;
  if (clGetDeviceInfo(d, what, 0, nullptr, &size) != CL_SUCCESS) return "";
  std::string s(size, '\0');
  clGetDeviceInfo(d, what, size, s.data(), nullptr);
  while (!s.empty() && s.back() == '\0') s.pop_back();
  return s;
}

// Programs by context, so that handlers find theirs from the queue.
struct Programs {
  absl::Mutex mu;
  std::map<cl_context, std::pair<cl_program, bool>> by_context ABSL_GUARDED_BY(mu);
};
Programs& BuiltinPrograms() {
  static auto* p = new Programs;
  return *p;
}

class ClDevice;

class ClStagingBlock final : public StagingBlock {
 public:
  static absl::StatusOr<std::unique_ptr<StagingBlock>> Make(cl_context ctx, cl_command_queue queue,
                                                            int64_t size) {
    cl_int err = CL_SUCCESS;
    // Host-allocated memory the runtime can pin: the transfer source and
    // destination of choice on OpenCL.
    cl_mem mem = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR,
                                static_cast<size_t>(size), nullptr, &err);
    FARCALL_CL_RETURN_IF_ERROR(err);
    void* p = clEnqueueMapBuffer(queue, mem, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0,
                                 static_cast<size_t>(size), 0, nullptr, nullptr, &err);
    if (err != CL_SUCCESS) {
      clReleaseMemObject(mem);
      return ClErrorToStatus(err, "clEnqueueMapBuffer");
    }
    return std::unique_ptr<StagingBlock>(new ClStagingBlock(mem, queue, p, size));
  }
  ~ClStagingBlock() override {
    Wait().IgnoreError();
    clEnqueueUnmapMemObject(queue_, mem_, data_, 0, nullptr, nullptr);
    clFinish(queue_);
    clReleaseMemObject(mem_);
  }
  uint8_t* data() override { return static_cast<uint8_t*>(data_); }
  int64_t size() const override { return size_; }
  absl::Status Record(Stream& stream) override {
    FARCALL_RETURN_IF_ERROR(Wait());
    FARCALL_CL_RETURN_IF_ERROR(clEnqueueMarkerWithWaitList(
        static_cast<cl_command_queue>(stream.native()), 0, nullptr, &event_));
    // Markers run only once the queue is flushed.
    FARCALL_CL_RETURN_IF_ERROR(clFlush(static_cast<cl_command_queue>(stream.native())));
    return absl::OkStatus();
  }
  absl::Status Wait() override {
    if (event_ == nullptr) return absl::OkStatus();
    const cl_int err = clWaitForEvents(1, &event_);
    clReleaseEvent(event_);
    event_ = nullptr;
    FARCALL_CL_RETURN_IF_ERROR(err);
    return absl::OkStatus();
  }

 private:
  ClStagingBlock(cl_mem mem, cl_command_queue queue, void* data, int64_t size)
      : mem_(mem), queue_(queue), data_(data), size_(size) {}
  cl_mem mem_;
  cl_command_queue queue_;  // the device's own queue, for map and unmap
  void* data_;
  int64_t size_;
  cl_event event_ = nullptr;
};

// An OpenCL buffer over host memory the agent has (CL_MEM_USE_HOST_PTR):
// the device reads and writes those bytes in place. Reading it back into
// the same host pointer is OpenCL's way to make the device's writes visible
// there (the spec defines clEnqueueReadBuffer to host_ptr + offset).
class ClHostBuffer final : public DeviceMemory {
 public:
  ClHostBuffer(cl_mem mem, int64_t size) : mem_(mem), size_(size) {}
  ~ClHostBuffer() override { clReleaseMemObject(mem_); }
  void* device_ptr() override { return mem_; }
  // Not for direct writes: the bytes are the device's while it holds them.
  uint8_t* host_ptr() override { return nullptr; }
  int64_t size() const override { return size_; }

 private:
  cl_mem mem_;
  int64_t size_;
};

class ClDevice final : public Device {
 public:
  static absl::StatusOr<std::unique_ptr<ClDevice>> Open(int ordinal, cl_platform_id platform,
                                                        cl_device_id id,
                                                        const BackendOptions& options);
  ~ClDevice() override {
    {
      absl::MutexLock l(&BuiltinPrograms().mu);
      BuiltinPrograms().by_context.erase(context_);
    }
    {
      absl::MutexLock l(&mu_);
      for (cl_command_queue q : free_queues_) clReleaseCommandQueue(q);
    }
    staging_.reset();
    allocator_.reset();
    clReleaseProgram(program_);
    clReleaseCommandQueue(own_queue_);
    clReleaseContext(context_);
  }

  Platform platform() const override { return Platform::kOneApi; }
  int ordinal() const override { return ordinal_; }
  std::string name() const override { return name_; }
  int64_t memory_bytes() const override { return memory_; }
  int64_t memory_used_bytes() const override {
    return allocator_ ? allocator_->in_use_bytes() + allocator_->cached_bytes() : 0;
  }
  absl::StatusOr<std::unique_ptr<DeviceMemory>> Allocate(int64_t size) override {
    return allocator_->Allocate(size);
  }
  absl::StatusOr<std::unique_ptr<Stream>> AcquireStream() override;
  std::unique_ptr<StagingBlock> TryAcquireStaging() override { return staging_->TryAcquire(); }
  absl::StatusOr<std::unique_ptr<DeviceMemory>> WrapHostMemory(uint8_t* p, int64_t size) override {
    if (!host_unified_ || size <= 0) return std::unique_ptr<DeviceMemory>();
    cl_int err = CL_SUCCESS;
    cl_mem m = clCreateBuffer(context_, CL_MEM_READ_WRITE | CL_MEM_USE_HOST_PTR,
                              static_cast<size_t>(size), p, &err);
    FARCALL_CL_RETURN_IF_ERROR(Track(err));
    return std::unique_ptr<DeviceMemory>(new ClHostBuffer(m, size));
  }
  absl::Status health() const override {
    absl::MutexLock l(&mu_);
    return sticky_;
  }

  // Passes `err` through, remembering a sticky one.
  cl_int Track(cl_int err) {
    if (IsStickyClError(err)) {
      absl::MutexLock l(&mu_);
      if (sticky_.ok()) sticky_ = ClErrorToStatus(err, "the device");
    }
    return err;
  }
  void ReturnQueue(cl_command_queue q) {
    absl::MutexLock l(&mu_);
    free_queues_.push_back(q);
  }

 private:
  ClDevice(int ordinal, std::string name, int64_t memory, cl_device_id id, cl_context ctx)
      : ordinal_(ordinal), name_(std::move(name)), memory_(memory), id_(id), context_(ctx) {}

  const int ordinal_;
  const std::string name_;
  const int64_t memory_;
  cl_device_id id_;
  cl_context context_;
  cl_command_queue own_queue_ = nullptr;
  cl_program program_ = nullptr;
  bool host_unified_ = false;  // the device shares the host's memory
  std::unique_ptr<CachingAllocator> allocator_;
  std::shared_ptr<StagingPool> staging_;
  mutable absl::Mutex mu_;
  std::vector<cl_command_queue> free_queues_ ABSL_GUARDED_BY(mu_);
  absl::Status sticky_ ABSL_GUARDED_BY(mu_);
};

class ClStream final : public Stream {
 public:
  ClStream(ClDevice& device, cl_command_queue q) : device_(device), queue_(q) {}
  ~ClStream() override { device_.ReturnQueue(queue_); }
  FarcallStreamKind kind() const override { return FARCALL_STREAM_OPENCL; }
  void* native() override { return queue_; }
  absl::Status CopyToDevice(const void* host, DeviceMemory& dst, int64_t offset,
                            int64_t size) override {
    FARCALL_CL_RETURN_IF_ERROR(device_.Track(clEnqueueWriteBuffer(
        queue_, static_cast<cl_mem>(dst.device_ptr()), CL_FALSE, static_cast<size_t>(offset),
        static_cast<size_t>(size), host, 0, nullptr, nullptr)));
    return absl::OkStatus();
  }
  absl::Status CopyToHost(DeviceMemory& src, int64_t offset, int64_t size, void* host) override {
    FARCALL_CL_RETURN_IF_ERROR(device_.Track(clEnqueueReadBuffer(
        queue_, static_cast<cl_mem>(src.device_ptr()), CL_FALSE, static_cast<size_t>(offset),
        static_cast<size_t>(size), host, 0, nullptr, nullptr)));
    return absl::OkStatus();
  }
  absl::Status Synchronize() override {
    FARCALL_CL_RETURN_IF_ERROR(device_.Track(clFinish(queue_)));
    return absl::OkStatus();
  }

 private:
  ClDevice& device_;
  cl_command_queue queue_;
};

absl::StatusOr<std::unique_ptr<Stream>> ClDevice::AcquireStream() {
  cl_command_queue q = nullptr;
  {
    absl::MutexLock l(&mu_);
    if (!free_queues_.empty()) {
      q = free_queues_.back();
      free_queues_.pop_back();
    }
  }
  if (q == nullptr) {
    cl_int err = CL_SUCCESS;
    q = clCreateCommandQueue(context_, id_, 0, &err);  // in order
    FARCALL_CL_RETURN_IF_ERROR(Track(err));
  }
  return std::make_unique<ClStream>(*this, q);
}

absl::StatusOr<std::unique_ptr<ClDevice>> ClDevice::Open(int ordinal, cl_platform_id platform,
                                                         cl_device_id id,
                                                         const BackendOptions& options) {
  cl_ulong memory = 0;
  clGetDeviceInfo(id, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof(memory), &memory, nullptr);
  size_t platform_name_size = 0;
  clGetPlatformInfo(platform, CL_PLATFORM_NAME, 0, nullptr, &platform_name_size);
  std::string platform_name(platform_name_size, '\0');
  clGetPlatformInfo(platform, CL_PLATFORM_NAME, platform_name_size, platform_name.data(), nullptr);
  while (!platform_name.empty() && platform_name.back() == '\0') platform_name.pop_back();
  const std::string name = absl::StrCat(DeviceString(id, CL_DEVICE_NAME), " (", platform_name, ")");

  cl_int err = CL_SUCCESS;
  cl_context ctx = clCreateContext(nullptr, 1, &id, nullptr, nullptr, &err);
  FARCALL_CL_RETURN_IF_ERROR(err);
  auto device =
      std::unique_ptr<ClDevice>(new ClDevice(ordinal, name, static_cast<int64_t>(memory), id, ctx));
  device->own_queue_ = clCreateCommandQueue(ctx, id, 0, &err);
  FARCALL_CL_RETURN_IF_ERROR(err);
  // Deprecated in OpenCL 2.0, still answered by the drivers of 1.2 and 3.0
  // (PoCL, Intel's); a driver that does not answer gets copies.
  cl_bool unified = CL_FALSE;
  if (clGetDeviceInfo(id, CL_DEVICE_HOST_UNIFIED_MEMORY, sizeof(unified), &unified, nullptr) ==
      CL_SUCCESS) {
    device->host_unified_ = unified == CL_TRUE;
  }

  // The built-ins, built for this device now, so a broken driver shows at
  // startup rather than in the first call.
  const bool fp64 = absl::StrContains(DeviceString(id, CL_DEVICE_EXTENSIONS), "cl_khr_fp64");
  const char* source = kBuiltinKernelsSource;
  device->program_ = clCreateProgramWithSource(ctx, 1, &source, nullptr, &err);
  FARCALL_CL_RETURN_IF_ERROR(err);
  const std::string build_options =
      absl::StrCat("-cl-std=CL1.2", fp64 ? " -DFARCALL_HAS_FP64=1" : "");
  err = clBuildProgram(device->program_, 1, &id, build_options.c_str(), nullptr, nullptr);
  if (err != CL_SUCCESS) {
    size_t log_size = 0;
    clGetProgramBuildInfo(device->program_, id, CL_PROGRAM_BUILD_LOG, 0, nullptr, &log_size);
    std::string log(log_size, '\0');
    clGetProgramBuildInfo(device->program_, id, CL_PROGRAM_BUILD_LOG, log_size, log.data(),
                          nullptr);
    return absl::InternalError(absl::StrCat("oneapi: building the built-in kernels for ", name,
                                            " failed (", ClErrorName(err), "): ", log));
  }
  {
    absl::MutexLock l(&BuiltinPrograms().mu);
    BuiltinPrograms().by_context[ctx] = {device->program_, fp64};
  }

  ClDevice* raw = device.get();
  device->allocator_ = std::make_unique<CachingAllocator>(
      absl::StrCat("oneapi device ", ordinal),
      CachingAllocator::RawOps{[raw](int64_t n) -> absl::StatusOr<void*> {
                                 cl_int e = CL_SUCCESS;
                                 cl_mem m = clCreateBuffer(raw->context_, CL_MEM_READ_WRITE,
                                                           static_cast<size_t>(n), nullptr, &e);
                                 FARCALL_CL_RETURN_IF_ERROR(raw->Track(e));
                                 return static_cast<void*>(m);
                               },
                               [](void* p) { clReleaseMemObject(static_cast<cl_mem>(p)); }},
      static_cast<int64_t>(memory) / 4);
  device->staging_ = StagingPool::Create(
      options.staging_bytes, options.staging_block_bytes,
      [raw](int64_t n) { return ClStagingBlock::Make(raw->context_, raw->own_queue_, n); });
  return device;
}

}  // namespace

absl::StatusOr<cl_program> BuiltinProgramFor(cl_command_queue queue, bool* has_fp64) {
  cl_context ctx = nullptr;
  FARCALL_CL_RETURN_IF_ERROR(
      clGetCommandQueueInfo(queue, CL_QUEUE_CONTEXT, sizeof(ctx), &ctx, nullptr));
  absl::MutexLock l(&BuiltinPrograms().mu);
  auto it = BuiltinPrograms().by_context.find(ctx);
  if (it == BuiltinPrograms().by_context.end()) {
    return absl::FailedPreconditionError(
        "oneapi: the call's queue belongs to no device of this agent.");
  }
  *has_fp64 = it->second.second;
  return it->second.first;
}

absl::StatusOr<Backend> OpenOneapiBackend(const BackendOptions& options) {
  cl_uint num_platforms = 0;
  cl_int err = clGetPlatformIDs(0, nullptr, &num_platforms);
  if (err != CL_SUCCESS || num_platforms == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("oneapi: no device found (no OpenCL platform: ",
                     err != CL_SUCCESS ? ClErrorName(err) : "none installed",
                     "); this agent cannot serve platform 'oneapi'. Install an OpenCL driver "
                     "(Intel's compute runtime, or pocl-opencl-icd for the CPU)."));
  }
  std::vector<cl_platform_id> platforms(num_platforms);
  FARCALL_CL_RETURN_IF_ERROR(clGetPlatformIDs(num_platforms, platforms.data(), nullptr));
  // GPUs first, then accelerators, then CPUs, so ordinal 0 is the best one.
  std::vector<std::pair<cl_platform_id, cl_device_id>> found;
  for (cl_device_type type :
       {cl_device_type{CL_DEVICE_TYPE_GPU}, cl_device_type{CL_DEVICE_TYPE_ACCELERATOR},
        cl_device_type{CL_DEVICE_TYPE_CPU}}) {
    for (cl_platform_id p : platforms) {
      cl_uint n = 0;
      if (clGetDeviceIDs(p, type, 0, nullptr, &n) != CL_SUCCESS || n == 0) continue;
      std::vector<cl_device_id> ids(n);
      clGetDeviceIDs(p, type, n, ids.data(), nullptr);
      for (cl_device_id id : ids) found.emplace_back(p, id);
    }
  }
  if (found.empty()) {
    return absl::FailedPreconditionError(
        "oneapi: no device found (the OpenCL platforms list no device); this agent "
        "cannot serve platform 'oneapi'.");
  }
  FARCALL_ASSIGN_OR_RETURN(
      std::vector<int> chosen,
      SelectDevices("oneapi", static_cast<int>(found.size()), options.devices));
  Backend backend;
  for (int ordinal : chosen) {
    FARCALL_ASSIGN_OR_RETURN(
        std::unique_ptr<ClDevice> d,
        ClDevice::Open(ordinal, found[ordinal].first, found[ordinal].second, options));
    backend.devices.push_back(std::move(d));
  }
  for (const FarcallHandlerDef& d : OneapiBuiltinHandlers()) {
    backend.builtin_handlers.push_back(d);
  }
  return backend;
}

}  // namespace farcall::agent::oneapi
