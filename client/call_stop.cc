#include "client/call_stop.h"

#include <atomic>
#include <map>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace farcall {

// A hook's function and whether it may still run. `mu` is held while it
// runs, so that ~StopHook waits for a run on another thread.
struct client_internal::StopHook::Entry {
  absl::Mutex mu;
  std::function<void()> on_stop ABSL_GUARDED_BY(mu);
  std::atomic<std::thread::id> running_on{};  // while on_stop runs

  void Run() {
    absl::MutexLock l(&mu);
    if (!on_stop) return;
    std::function<void()> f = std::move(on_stop);
    on_stop = nullptr;
    running_on = std::this_thread::get_id();
    f();
    running_on = std::thread::id();
  }
};

struct CallStop::State {
  absl::Mutex mu;
  bool stopped ABSL_GUARDED_BY(mu) = false;
  uint64_t next ABSL_GUARDED_BY(mu) = 0;
  std::map<uint64_t, std::shared_ptr<client_internal::StopHook::Entry>> hooks ABSL_GUARDED_BY(mu);
};

CallStop::CallStop() : state_(std::make_shared<State>()) {}
CallStop::~CallStop() = default;

void CallStop::Stop() {
  std::vector<std::shared_ptr<client_internal::StopHook::Entry>> hooks;
  {
    absl::MutexLock l(&state_->mu);
    if (state_->stopped) return;
    state_->stopped = true;
    for (auto& [id, e] : state_->hooks) hooks.push_back(e);
    state_->hooks.clear();
  }
  // Outside the state's lock: a hook may end its call, and the call remove
  // its hooks from states.
  for (auto& e : hooks) e->Run();
}

bool CallStop::stopped() const {
  absl::MutexLock l(&state_->mu);
  return state_->stopped;
}

namespace client_internal {

StopHook::StopHook(const CallStop* a, const CallStop* b, std::function<void()> on_stop)
    : entry_(std::make_shared<Entry>()) {
  {
    absl::MutexLock l(&entry_->mu);
    entry_->on_stop = std::move(on_stop);
  }
  bool stopped = false;
  for (const CallStop* s : {a, b}) {
    if (s == nullptr) continue;
    CallStop::State& state = *s->state_;
    absl::MutexLock l(&state.mu);
    if (state.stopped) {
      stopped = true;
      continue;
    }
    (s == a ? a_id_ : b_id_) = state.next;
    state.hooks.emplace(state.next++, entry_);
    (s == a ? a_ : b_) = s->state_;
  }
  if (stopped) entry_->Run();
}

StopHook::~StopHook() {
  for (auto [state, id] : {std::pair(a_.get(), a_id_), std::pair(b_.get(), b_id_)}) {
    if (state == nullptr) continue;
    absl::MutexLock l(&state->mu);
    state->hooks.erase(id);
  }
  // On this thread, within on_stop (which ended its own call): it is done
  // with whatever this hook guards. On another: wait for it to end.
  if (entry_->running_on.load() == std::this_thread::get_id()) return;
  absl::MutexLock l(&entry_->mu);
  entry_->on_stop = nullptr;
}

bool Stopped(const CallStop* a, const CallStop* b) {
  return (a != nullptr && a->stopped()) || (b != nullptr && b->stopped());
}

absl::Status StoppedStatus() { return absl::CancelledError("the caller stopped the call."); }

}  // namespace client_internal
}  // namespace farcall
