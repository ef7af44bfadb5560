// The namespace the shared GPU code is compiled into: farcall::agent::cuda
// (FARCALL_GPU_CUDA) or farcall::agent::rocm (FARCALL_GPU_HIP). Kernel files
// include only this; host files include gpu_api.h.
#ifndef FARCALL_DEVICE_AGENTS_GPU_GPU_NAMESPACE_H_
#define FARCALL_DEVICE_AGENTS_GPU_GPU_NAMESPACE_H_

#if defined(FARCALL_GPU_CUDA)
#define FARCALL_GPU_NS cuda
#elif defined(FARCALL_GPU_HIP)
#define FARCALL_GPU_NS rocm
#else
#error "build device_agents/gpu/ with FARCALL_GPU_CUDA or FARCALL_GPU_HIP defined"
#endif

#endif  // FARCALL_DEVICE_AGENTS_GPU_GPU_NAMESPACE_H_
