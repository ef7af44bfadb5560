// Launchers for the built-in handlers' device kernels (gpu_kernels.inc,
// compiled by nvcc or hipcc). Each enqueues its kernel on `stream` (a
// cudaStream_t or hipStream_t) and returns the launch's error code as an
// int (0: success). Plain types only, so that host code built by the C++
// compiler can call them. `dtype` is a FarcallDType number; see
// builtins/builtin_handlers.h for what each computes.
#ifndef FARCALL_DEVICE_AGENTS_GPU_GPU_KERNELS_H_
#define FARCALL_DEVICE_AGENTS_GPU_GPU_KERNELS_H_

#include <cstdint>

#include "device_agents/gpu/gpu_namespace.h"

namespace farcall::agent::FARCALL_GPU_NS::kernels {

int LaunchScale(int32_t dtype, const void* x, void* out, int64_t n, double alpha, void* stream);
int LaunchAxpy(int32_t dtype, const void* x, const void* y, void* out, int64_t n, double alpha,
               void* stream);
int LaunchAdd(int32_t dtype, const void* a, const void* b, void* out, int64_t n, void* stream);
// One block reduces everything in a fixed order, so results are
// deterministic and the launch can be captured into a graph.
int LaunchSum(int32_t dtype, const void* x, int64_t n, int64_t lanes, void* out, void* stream);

}  // namespace farcall::agent::FARCALL_GPU_NS::kernels

#endif  // FARCALL_DEVICE_AGENTS_GPU_GPU_KERNELS_H_
