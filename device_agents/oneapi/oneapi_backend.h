// The oneapi backend: OpenCL devices (Intel GPUs through their OpenCL
// driver; PoCL's CPU device in CI). Handlers get each tensor as a cl_mem in
// FarcallBuffer.data and the call's in-order cl_command_queue as the stream;
// the built-ins are OpenCL C kernels (builtin_kernels.cl). Built when CMake
// finds OpenCL. command_buffer_compatible is accepted and ignored here.
#ifndef FARCALL_DEVICE_AGENTS_ONEAPI_ONEAPI_BACKEND_H_
#define FARCALL_DEVICE_AGENTS_ONEAPI_ONEAPI_BACKEND_H_

#include <span>

#include "absl/status/statusor.h"
#include "device_agents/device.h"
#include "device_agents/oneapi/cl_status.h"

namespace farcall::agent::oneapi {

// Every OpenCL device of every platform, GPUs first. FAILED_PRECONDITION
// "oneapi: no device found (...)" when there is none.
absl::StatusOr<Backend> OpenOneapiBackend(const BackendOptions& options);

// The built-ins' program on the device of `queue`, built when the backend
// opened; `has_fp64` says whether its float64 kernels exist.
absl::StatusOr<cl_program> BuiltinProgramFor(cl_command_queue queue, bool* has_fp64);

// The built-in handlers (builtin_handlers.cc).
std::span<const FarcallHandlerDef> OneapiBuiltinHandlers();

}  // namespace farcall::agent::oneapi

#endif  // FARCALL_DEVICE_AGENTS_ONEAPI_ONEAPI_BACKEND_H_
