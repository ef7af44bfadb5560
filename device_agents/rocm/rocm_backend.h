// The rocm backend: the shared GPU backend (device_agents/gpu/) built on the
// HIP runtime, with the built-in kernels compiled by hipcc
// (builtin_kernels.hip) for gfx908, gfx90a and gfx1030. Built when CMake finds hipcc.
#ifndef FARCALL_DEVICE_AGENTS_ROCM_ROCM_BACKEND_H_
#define FARCALL_DEVICE_AGENTS_ROCM_ROCM_BACKEND_H_

#include "absl/status/statusor.h"
#include "device_agents/device.h"

namespace farcall::agent::rocm {

// FAILED_PRECONDITION "rocm: no device found (...)" without a device.
absl::StatusOr<Backend> OpenRocmBackend(const BackendOptions& options);

}  // namespace farcall::agent::rocm

#endif  // FARCALL_DEVICE_AGENTS_ROCM_ROCM_BACKEND_H_
