// The HIP runtime under the names the shared GPU backend (device_agents/gpu/)
// uses, and FARCALL_HIP_RETURN_IF_ERROR: the one place a hipError_t turns
// into a Status. Host code only; included when FARCALL_GPU_HIP is defined.
#ifndef FARCALL_DEVICE_AGENTS_ROCM_HIP_API_H_
#define FARCALL_DEVICE_AGENTS_ROCM_HIP_API_H_

#include <hip/hip_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "absl/status/status.h"
#include "core/platform.h"
#include "farcall/handler_api.h"

namespace farcall::agent::rocm {

// Converts a failed HIP call into a Status: RESOURCE_EXHAUSTED for out of
// memory, FAILED_PRECONDITION when there is no usable device, INTERNAL
// otherwise. A sticky error (the context is lost: illegal address, failed
// launch) also marks the current device failed, for Device::health().
absl::Status HipErrorToStatus(hipError_t error, const char* expr);

}  // namespace farcall::agent::rocm

#define FARCALL_HIP_RETURN_IF_ERROR(expr)                                         \
  do {                                                                            \
    const hipError_t farcall_hip_error_ = (expr);                                 \
    if (farcall_hip_error_ != hipSuccess) {                                       \
      return ::farcall::agent::rocm::HipErrorToStatus(farcall_hip_error_, #expr); \
    }                                                                             \
  } while (0)

namespace farcall::agent::rocm::api {

using Error = hipError_t;
using StreamT = hipStream_t;
using EventT = hipEvent_t;
using GraphT = hipGraph_t;
using GraphExecT = hipGraphExec_t;

inline constexpr Error kSuccess = hipSuccess;
inline constexpr Platform kPlatform = Platform::kRocm;
inline constexpr FarcallStreamKind kStreamKind = FARCALL_STREAM_HIP;
inline constexpr char kName[] = "rocm";
inline constexpr char kToolkit[] = "ROCm (amdgpu)";

inline absl::Status ToStatus(Error e, const char* expr) { return HipErrorToStatus(e, expr); }
inline const char* ErrorName(Error e) { return hipGetErrorName(e); }
inline const char* ErrorString(Error e) { return hipGetErrorString(e); }
inline bool IsOutOfMemory(Error e) { return e == hipErrorOutOfMemory; }
inline bool IsNoDevice(Error e) {
  return e == hipErrorNoDevice || e == hipErrorInsufficientDriver || e == hipErrorNotInitialized ||
         e == hipErrorInvalidDevice;
}
// Errors after which the context is unusable until the process restarts.
inline bool IsSticky(Error e) {
  switch (e) {
    case hipErrorIllegalAddress:
    case hipErrorLaunchFailure:
    case hipErrorECCNotCorrectable:
    case hipErrorAssert:
    case hipErrorLaunchTimeOut:
      return true;
    default:
      return false;
  }
}

inline Error GetLastError() { return hipGetLastError(); }
inline Error GetDeviceCount(int* n) { return hipGetDeviceCount(n); }
inline Error GetDevice(int* d) { return hipGetDevice(d); }
inline Error SetDevice(int d) { return hipSetDevice(d); }
inline Error DeviceName(int d, char* name, size_t size, int64_t* memory) {
  hipDeviceProp_t p{};
  Error e = hipGetDeviceProperties(&p, d);
  if (e != hipSuccess) return e;
  // Both fields are NUL-terminated arrays; the name may be cut at `size`.
  std::string full = std::string(p.name) + " (" + p.gcnArchName + ")";
  snprintf(name, size, "%s", full.c_str());
  *memory = static_cast<int64_t>(p.totalGlobalMem);
  return e;
}
inline Error Malloc(void** p, size_t n) { return hipMalloc(p, n); }
inline Error Free(void* p) { return hipFree(p); }
inline Error HostAlloc(void** p, size_t n) { return hipHostMalloc(p, n, hipHostMallocPortable); }
inline Error HostFree(void* p) { return hipHostFree(p); }
// Pins memory the process already has (a client's shared-memory region).
inline Error HostRegister(void* p, size_t n) {
  return hipHostRegister(p, n, hipHostRegisterPortable);
}
inline Error HostUnregister(void* p) { return hipHostUnregister(p); }
inline Error StreamCreate(StreamT* s) { return hipStreamCreateWithFlags(s, hipStreamNonBlocking); }
inline Error StreamDestroy(StreamT s) { return hipStreamDestroy(s); }
inline Error StreamSynchronize(StreamT s) { return hipStreamSynchronize(s); }
inline Error CopyH2D(void* dst, const void* src, size_t n, StreamT s) {
  return hipMemcpyAsync(dst, src, n, hipMemcpyHostToDevice, s);
}
inline Error CopyD2H(void* dst, const void* src, size_t n, StreamT s) {
  return hipMemcpyAsync(dst, src, n, hipMemcpyDeviceToHost, s);
}
inline Error CopyD2D(void* dst, const void* src, size_t n, StreamT s) {
  return hipMemcpyAsync(dst, src, n, hipMemcpyDeviceToDevice, s);
}
inline Error EventCreate(EventT* e) { return hipEventCreateWithFlags(e, hipEventDisableTiming); }
inline Error EventDestroy(EventT e) { return hipEventDestroy(e); }
inline Error EventRecord(EventT e, StreamT s) { return hipEventRecord(e, s); }
inline Error EventSynchronize(EventT e) { return hipEventSynchronize(e); }
inline Error BeginCapture(StreamT s) {
  return hipStreamBeginCapture(s, hipStreamCaptureModeThreadLocal);
}
inline Error EndCapture(StreamT s, GraphT* g) { return hipStreamEndCapture(s, g); }
inline Error GraphInstantiate(GraphExecT* exec, GraphT g) {
  return hipGraphInstantiate(exec, g, nullptr, nullptr, 0);
}
inline Error GraphLaunch(GraphExecT exec, StreamT s) { return hipGraphLaunch(exec, s); }
inline Error GraphDestroy(GraphT g) { return hipGraphDestroy(g); }
inline Error GraphExecDestroy(GraphExecT exec) { return hipGraphExecDestroy(exec); }

}  // namespace farcall::agent::rocm::api

#endif  // FARCALL_DEVICE_AGENTS_ROCM_HIP_API_H_
