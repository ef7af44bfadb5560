// The CUDA build of the built-in kernels (see gpu/gpu_kernels.inc).
#define FARCALL_GPU_CUDA 1
#include <cuda_runtime.h>

#include "device_agents/gpu/gpu_kernels.inc"
