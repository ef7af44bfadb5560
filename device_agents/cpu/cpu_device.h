// The cpu backend: host memory is device memory, so handlers run on the
// worker thread and received chunks land directly in the tensors.
#ifndef FARCALL_DEVICE_AGENTS_CPU_CPU_DEVICE_H_
#define FARCALL_DEVICE_AGENTS_CPU_CPU_DEVICE_H_

#include "absl/status/statusor.h"
#include "device_agents/device.h"

namespace farcall::agent::cpu {

absl::StatusOr<Backend> OpenCpuBackend(const BackendOptions& options);

}  // namespace farcall::agent::cpu

#endif  // FARCALL_DEVICE_AGENTS_CPU_CPU_DEVICE_H_
