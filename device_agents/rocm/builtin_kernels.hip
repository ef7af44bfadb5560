// The HIP build of the built-in kernels (see gpu/gpu_kernels.inc).
#define FARCALL_GPU_HIP 1
#include <hip/hip_runtime.h>

namespace farcall::agent::rocm::kernels {
using NativeStream = hipStream_t;
inline int LastError() { return static_cast<int>(hipGetLastError()); }
constexpr int kInvalidValue = static_cast<int>(hipErrorInvalidValue);
inline int MallocAsync(void** p, size_t bytes, NativeStream s) {
  return static_cast<int>(hipMallocAsync(p, bytes, s));
}
inline int FreeAsync(void* p, NativeStream s) { return static_cast<int>(hipFreeAsync(p, s)); }
}  // namespace farcall::agent::rocm::kernels

#include "device_agents/gpu/gpu_kernels.inc"
