#include "device_agents/cuda/cuda_backend.h"

#include "device_agents/gpu/gpu_backend.h"

namespace farcall::agent::cuda {

absl::StatusOr<Backend> OpenCudaBackend(const BackendOptions& options) {
  return OpenGpuBackend(options);
}

}  // namespace farcall::agent::cuda
