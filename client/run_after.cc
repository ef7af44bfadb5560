#include "client/run_after.h"

#include <thread>
#include <utility>

#include "absl/time/clock.h"

namespace farcall::client_internal {

// A thread per task: tasks are an asynchronous call's retries, a handful a
// second at most, and a thread of their own keeps one slow attempt from
// holding up another's.
void RunAfter(absl::Duration delay, std::function<void()> task) {
  std::thread([delay, task = std::move(task)] {
    absl::SleepFor(delay);
    task();
  }).detach();
}

}  // namespace farcall::client_internal
