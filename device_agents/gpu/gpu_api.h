// Picks the runtime the shared GPU backend is compiled against. The files in
// device_agents/gpu/ are built twice, once into the cuda backend
// (FARCALL_GPU_CUDA: CUDA runtime, namespace farcall::agent::cuda) and once
// into the rocm backend (FARCALL_GPU_HIP: HIP runtime, namespace
// farcall::agent::rocm), so both can live in one agent binary.
#ifndef FARCALL_DEVICE_AGENTS_GPU_GPU_API_H_
#define FARCALL_DEVICE_AGENTS_GPU_GPU_API_H_

#include "device_agents/gpu/gpu_namespace.h"

#if defined(FARCALL_GPU_CUDA)
#include "device_agents/cuda/cuda_api.h"
#define FARCALL_GPU_RETURN_IF_ERROR FARCALL_CUDA_RETURN_IF_ERROR
#define FARCALL_GPU_ERROR_TO_STATUS CudaErrorToStatus
#else
#include "device_agents/rocm/hip_api.h"
#define FARCALL_GPU_RETURN_IF_ERROR FARCALL_HIP_RETURN_IF_ERROR
#define FARCALL_GPU_ERROR_TO_STATUS HipErrorToStatus
#endif

#endif  // FARCALL_DEVICE_AGENTS_GPU_GPU_API_H_
