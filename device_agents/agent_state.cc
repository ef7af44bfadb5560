#include "device_agents/agent_state.h"

#include <utility>

namespace farcall::agent {

void AgentState::ReportDeviceFailure(const absl::Status& error) {
  std::function<void(const absl::Status&)> fn;
  {
    absl::MutexLock l(&failure_mu);
    if (!device_failure.ok()) return;  // reported once
    device_failure = error;
    fn = on_device_failure;
  }
  if (fn) fn(error);
}

void AgentState::SetDeviceFailureHandler(std::function<void(const absl::Status&)> fn) {
  absl::Status pending;
  {
    absl::MutexLock l(&failure_mu);
    on_device_failure = fn;
    pending = device_failure;
  }
  if (!pending.ok()) fn(pending);
}

}  // namespace farcall::agent
