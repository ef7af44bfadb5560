// The HIP build of the built-in kernels (see gpu/gpu_kernels.inc).
#define FARCALL_GPU_HIP 1
#include <hip/hip_runtime.h>

#include "device_agents/gpu/gpu_kernels.inc"
