// Steps of one call that must run one at a time, in the order they were
// added, on an executor (the agent's shared workers), while they are added
// from any thread. A UCX call on a device agent adds one step per checked
// piece (its copy toward the device) from the UCX worker's thread, and then
// the step that runs the handler: that one runs after every copy before it.
//
//   SerialSteps steps(shared.Elsewhere(tenant));
//   steps.Add([&] { Stage(piece); });    // any thread, never blocks
//   steps.Add([&] { RunTheHandler(); });  // after the copies above
//
// At most one step runs at a time, and at most one executor task is queued
// or running, whatever the number of steps waiting. A step may destroy the
// SerialSteps (the call it belongs to): the queue outlives it.
//
// Thread safety: thread-safe.
#ifndef FARCALL_DEVICE_AGENTS_SERIAL_STEPS_H_
#define FARCALL_DEVICE_AGENTS_SERIAL_STEPS_H_

#include <deque>
#include <functional>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace farcall::agent {

class SerialSteps {
 public:
  using Executor = std::function<void(std::function<void()>)>;
  explicit SerialSteps(Executor executor);
  SerialSteps(const SerialSteps&) = delete;
  SerialSteps& operator=(const SerialSteps&) = delete;

  // Runs `step` on the executor after the steps added before it.
  void Add(std::function<void()> step);

 private:
  struct Queue {
    Executor executor;
    absl::Mutex mu;
    std::deque<std::function<void()>> steps ABSL_GUARDED_BY(mu);
    bool draining ABSL_GUARDED_BY(mu) = false;  // a task is queued or runs
  };
  static void Drain(const std::shared_ptr<Queue>& q);

  std::shared_ptr<Queue> queue_;
};

}  // namespace farcall::agent

#endif  // FARCALL_DEVICE_AGENTS_SERIAL_STEPS_H_
