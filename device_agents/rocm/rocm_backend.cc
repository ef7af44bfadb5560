#include "device_agents/rocm/rocm_backend.h"

#include "device_agents/gpu/gpu_backend.h"

namespace farcall::agent::rocm {

absl::StatusOr<Backend> OpenRocmBackend(const BackendOptions& options) {
  return OpenGpuBackend(options);
}

}  // namespace farcall::agent::rocm
