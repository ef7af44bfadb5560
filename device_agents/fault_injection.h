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
// And the process itself, for tests of what callers get when an agent dies
// or drains at a given moment of a call (tests/fault/fault_matrix_test.cc):
//   exit_at=PHASE  the first call to reach PHASE ends the process there:
//                  header (a call arrived, before its header is read),
//                  upload (its first input bytes are in), handler (its
//                  handler is about to run), result_first (its first result
//                  bytes went to the caller), result_mid (half of them
//                  went), result_last (all went, before the status);
//   exit_by=kill|term  SIGKILL (the default: the host died) or SIGTERM (a
//                  drain, which lets the call finish);
//   exit_once=PATH only the first process to create PATH exits (agents that
//                  share a plan: one dies, the others serve the call again);
//                  PATH then holds the phase's name, the proof it was reached;
//   exit_after_calls=N  only once the agent has ended N calls (a test's
//                  setup calls, such as putting a resident array, go first).
//
// Thread safety: a faulty device is thread-safe, like the device it wraps.
#ifndef FARCALL_DEVICE_AGENTS_FAULT_INJECTION_H_
#define FARCALL_DEVICE_AGENTS_FAULT_INJECTION_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "device_agents/device.h"

namespace farcall::agent {

// The moments of a call that exit_at names.
enum class CallPhase { kNone, kHeader, kUpload, kHandler, kResultFirst, kResultMid, kResultLast };

struct FaultPlan {
  int64_t allocate_every = 0;
  int64_t run_every = 0;
  int64_t lose_device_at = 0;
  CallPhase exit_at = CallPhase::kNone;
  bool exit_by_term = false;
  std::string exit_once;
  int64_t exit_after_calls = 0;
  bool empty() const {
    return allocate_every == 0 && run_every == 0 && lose_device_at == 0 &&
           exit_at == CallPhase::kNone;
  }
  // "allocate=3,run=10" again, for logs.
  std::string ToString() const;
};

// Parses "allocate=N,run=N,lose_device=N" (any subset; empty: no faults).
// INVALID_ARGUMENT naming the bad entry otherwise.
absl::StatusOr<FaultPlan> ParseFaultPlan(absl::string_view spec);

// Wraps every device of `backend` so that `plan`'s faults happen; the
// counts are shared by the devices. Does nothing for an empty plan. Arms
// exit_at for the process; `calls_ended` (the agent's count, which outlives
// the process's calls) is what exit_after_calls reads.
void InjectFaults(const FaultPlan& plan, Backend& backend,
                  const std::atomic<uint64_t>* calls_ended = nullptr);

// A call of this agent reached `phase`: where the plan exits there, the
// process raises its signal (once). Costs one atomic load otherwise.
void ReachedPhase(CallPhase phase);
// Whether some exit_at phase is armed: callers skip the work of finding
// the phase (a stream's result bytes) otherwise.
bool PhaseExitArmed();

}  // namespace farcall::agent

#endif  // FARCALL_DEVICE_AGENTS_FAULT_INJECTION_H_
