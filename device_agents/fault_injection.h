// Faults injected into an agent's devices, for testing what callers, routers
// and operators see when a device fails (the agent's --inject_faults flag).
// A faulty device fails the way a real one does, through the same Device
// interface, so the agent's answers and metrics are those of a real failure:
//   allocate=N     every Nth allocation finds the device out of memory
//                  (RESOURCE_EXHAUSTED);
//   run=N          every Nth handler launch fails (INTERNAL); the device
//                  stays usable, as after a kernel's own error;
//   lose_device=N  the Nth handler launch loses its device: that call and
//                  every later one there fail, and the device reports the
//                  sticky error, so the agent answers NOT_SERVING to health
//                  checks.
// N counts from the agent's start over all its devices' calls; 0 is off.
//
// Thread safety: a faulty device is thread-safe, like the device it wraps.
#ifndef FARCALL_DEVICE_AGENTS_FAULT_INJECTION_H_
#define FARCALL_DEVICE_AGENTS_FAULT_INJECTION_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "device_agents/device.h"

namespace farcall::agent {

struct FaultPlan {
  int64_t allocate_every = 0;
  int64_t run_every = 0;
  int64_t lose_device_at = 0;
  bool empty() const { return allocate_every == 0 && run_every == 0 && lose_device_at == 0; }
  // "allocate=3,run=10" again, for logs.
  std::string ToString() const;
};

// Parses "allocate=N,run=N,lose_device=N" (any subset; empty: no faults).
// INVALID_ARGUMENT naming the bad entry otherwise.
absl::StatusOr<FaultPlan> ParseFaultPlan(absl::string_view spec);

// Wraps every device of `backend` so that `plan`'s faults happen; the
// counts are shared by the devices. Does nothing for an empty plan.
void InjectFaults(const FaultPlan& plan, Backend& backend);

}  // namespace farcall::agent

#endif  // FARCALL_DEVICE_AGENTS_FAULT_INJECTION_H_
