// The GPU backend shared by cuda/ and rocm/: devices, streams, pinned
// staging, the caching allocator, graph capture for command-buffer-
// compatible handlers, and the built-ins as device kernels. Compiled once per
// runtime (see gpu_api.h); each platform folder exposes it as its backend.
#ifndef FARCALL_DEVICE_AGENTS_GPU_GPU_BACKEND_H_
#define FARCALL_DEVICE_AGENTS_GPU_GPU_BACKEND_H_

#include <span>

#include "absl/status/statusor.h"
#include "device_agents/device.h"
#include "device_agents/gpu/gpu_namespace.h"

namespace farcall::agent::FARCALL_GPU_NS {

// FAILED_PRECONDITION "<platform>: no device found (...)" when the runtime
// sees no device, or has no driver.
absl::StatusOr<Backend> OpenGpuBackend(const BackendOptions& options);

// The built-ins for this platform (gpu_builtins.cc).
std::span<const FarcallHandlerDef> GpuBuiltinHandlers();

}  // namespace farcall::agent::FARCALL_GPU_NS

#endif  // FARCALL_DEVICE_AGENTS_GPU_GPU_BACKEND_H_
