// The cuda backend: the shared GPU backend (device_agents/gpu/) built on the
// CUDA runtime, with the built-in kernels compiled by nvcc
// (builtin_kernels.cu). Built when CMake finds nvcc.
#ifndef FARCALL_DEVICE_AGENTS_CUDA_CUDA_BACKEND_H_
#define FARCALL_DEVICE_AGENTS_CUDA_CUDA_BACKEND_H_

#include "absl/status/statusor.h"
#include "device_agents/device.h"

namespace farcall::agent::cuda {

// FAILED_PRECONDITION "cuda: no device found (...)" without a device.
absl::StatusOr<Backend> OpenCudaBackend(const BackendOptions& options);

}  // namespace farcall::agent::cuda

#endif  // FARCALL_DEVICE_AGENTS_CUDA_CUDA_BACKEND_H_
