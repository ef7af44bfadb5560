// The CUDA build of the built-in kernels (see gpu/gpu_kernels.inc).
#define FARCALL_GPU_CUDA 1
#include <cuda_runtime.h>

namespace farcall::agent::cuda::kernels {
using NativeStream = cudaStream_t;
inline int LastError() { return static_cast<int>(cudaGetLastError()); }
constexpr int kInvalidValue = static_cast<int>(cudaErrorInvalidValue);
inline int MallocAsync(void** p, size_t bytes, NativeStream s) {
  return static_cast<int>(cudaMallocAsync(p, bytes, s));
}
inline int FreeAsync(void* p, NativeStream s) { return static_cast<int>(cudaFreeAsync(p, s)); }
}  // namespace farcall::agent::cuda::kernels

#include "device_agents/gpu/gpu_kernels.inc"
