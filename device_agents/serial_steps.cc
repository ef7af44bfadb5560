#include "device_agents/serial_steps.h"

#include <utility>

namespace farcall::agent {

SerialSteps::SerialSteps(Executor executor) : queue_(std::make_shared<Queue>()) {
  queue_->executor = std::move(executor);
}

void SerialSteps::Add(std::function<void()> step) {
  {
    absl::MutexLock l(&queue_->mu);
    queue_->steps.push_back(std::move(step));
    if (queue_->draining) return;  // the running task takes it
    queue_->draining = true;
  }
  queue_->executor([q = queue_] { Drain(q); });
}

void SerialSteps::Drain(const std::shared_ptr<Queue>& q) {
  for (;;) {
    std::function<void()> step;
    {
      absl::MutexLock l(&q->mu);
      if (q->steps.empty()) {
        q->draining = false;
        return;
      }
      step = std::move(q->steps.front());
      q->steps.pop_front();
    }
    step();  // may destroy the SerialSteps; `q` is this task's own
  }
}

}  // namespace farcall::agent
