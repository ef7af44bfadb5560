// The CUDA runtime under the names the shared GPU backend (device_agents/gpu/)
// uses, and FARCALL_CUDA_RETURN_IF_ERROR: the one place a cudaError_t turns
// into a Status. Host code only; included when FARCALL_GPU_CUDA is defined.
#ifndef FARCALL_DEVICE_AGENTS_CUDA_CUDA_API_H_
#define FARCALL_DEVICE_AGENTS_CUDA_CUDA_API_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>

#include "absl/status/status.h"
#include "core/platform.h"
#include "farcall/handler_api.h"

namespace farcall::agent::cuda {

// Converts a failed CUDA call into a Status: RESOURCE_EXHAUSTED for out of
// memory, FAILED_PRECONDITION when there is no usable device, INTERNAL
// otherwise. A sticky error (the context is lost: illegal address, failed
// launch) also marks the current device failed, for Device::health().
absl::Status CudaErrorToStatus(cudaError_t error, const char* expr);

}  // namespace farcall::agent::cuda

#define FARCALL_CUDA_RETURN_IF_ERROR(expr)                                          \
  do {                                                                              \
    const cudaError_t farcall_cuda_error_ = (expr);                                 \
    if (farcall_cuda_error_ != cudaSuccess) {                                       \
      return ::farcall::agent::cuda::CudaErrorToStatus(farcall_cuda_error_, #expr); \
    }                                                                               \
  } while (0)

namespace farcall::agent::cuda::api {

using Error = cudaError_t;
using StreamT = cudaStream_t;
using EventT = cudaEvent_t;
using GraphT = cudaGraph_t;
using GraphExecT = cudaGraphExec_t;

inline constexpr Error kSuccess = cudaSuccess;
inline constexpr Platform kPlatform = Platform::kCuda;
inline constexpr FarcallStreamKind kStreamKind = FARCALL_STREAM_CUDA;
inline constexpr char kName[] = "cuda";
inline constexpr char kToolkit[] = "CUDA";

inline absl::Status ToStatus(Error e, const char* expr) { return CudaErrorToStatus(e, expr); }
inline const char* ErrorName(Error e) { return cudaGetErrorName(e); }
inline const char* ErrorString(Error e) { return cudaGetErrorString(e); }
inline bool IsOutOfMemory(Error e) { return e == cudaErrorMemoryAllocation; }
inline bool IsNoDevice(Error e) {
  return e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver ||
         e == cudaErrorInitializationError || e == cudaErrorSystemDriverMismatch ||
         e == cudaErrorCompatNotSupportedOnDevice;
}
// Errors after which the context is unusable until the process restarts.
inline bool IsSticky(Error e) {
  switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorECCUncorrectable:
    case cudaErrorAssert:
    case cudaErrorLaunchTimeout:
      return true;
    default:
      return false;
  }
}

inline Error GetLastError() { return cudaGetLastError(); }
inline Error GetDeviceCount(int* n) { return cudaGetDeviceCount(n); }
inline Error GetDevice(int* d) { return cudaGetDevice(d); }
inline Error SetDevice(int d) { return cudaSetDevice(d); }
inline Error DeviceName(int d, char* name, size_t size, int64_t* memory) {
  cudaDeviceProp p{};
  Error e = cudaGetDeviceProperties(&p, d);
  if (e != cudaSuccess) return e;
  snprintf(name, size, "%s", p.name);
  *memory = static_cast<int64_t>(p.totalGlobalMem);
  return e;
}
inline Error Malloc(void** p, size_t n) { return cudaMalloc(p, n); }
inline Error Free(void* p) { return cudaFree(p); }
inline Error HostAlloc(void** p, size_t n) { return cudaHostAlloc(p, n, cudaHostAllocPortable); }
inline Error HostFree(void* p) { return cudaFreeHost(p); }
// Pins memory the process already has (a client's shared-memory region).
inline Error HostRegister(void* p, size_t n) {
  return cudaHostRegister(p, n, cudaHostRegisterPortable);
}
inline Error HostUnregister(void* p) { return cudaHostUnregister(p); }
inline Error StreamCreate(StreamT* s) {
  return cudaStreamCreateWithFlags(s, cudaStreamNonBlocking);
}
inline Error StreamDestroy(StreamT s) { return cudaStreamDestroy(s); }
inline Error StreamSynchronize(StreamT s) { return cudaStreamSynchronize(s); }
inline Error CopyH2D(void* dst, const void* src, size_t n, StreamT s) {
  return cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, s);
}
inline Error CopyD2H(void* dst, const void* src, size_t n, StreamT s) {
  return cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, s);
}
inline Error CopyD2D(void* dst, const void* src, size_t n, StreamT s) {
  return cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, s);
}
inline Error EventCreate(EventT* e) { return cudaEventCreateWithFlags(e, cudaEventDisableTiming); }
inline Error EventDestroy(EventT e) { return cudaEventDestroy(e); }
inline Error EventRecord(EventT e, StreamT s) { return cudaEventRecord(e, s); }
inline Error EventSynchronize(EventT e) { return cudaEventSynchronize(e); }
inline Error BeginCapture(StreamT s) {
  return cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
}
inline Error EndCapture(StreamT s, GraphT* g) { return cudaStreamEndCapture(s, g); }
inline Error GraphInstantiate(GraphExecT* exec, GraphT g) {
  return cudaGraphInstantiateWithFlags(exec, g, 0);
}
inline Error GraphLaunch(GraphExecT exec, StreamT s) { return cudaGraphLaunch(exec, s); }
inline Error GraphDestroy(GraphT g) { return cudaGraphDestroy(g); }
inline Error GraphExecDestroy(GraphExecT exec) { return cudaGraphExecDestroy(exec); }

}  // namespace farcall::agent::cuda::api

#endif  // FARCALL_DEVICE_AGENTS_CUDA_CUDA_API_H_
