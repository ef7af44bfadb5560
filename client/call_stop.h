// How a call learns that its caller stopped it (CallStop, Client::Close):
// a StopHook runs a function (cancelling the call's gRPC context, say) once
// either of two CallStops is stopped, for as long as the hook lives.
// Internal to the client library.
#ifndef FARCALL_CLIENT_CALL_STOP_H_
#define FARCALL_CLIENT_CALL_STOP_H_

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "farcall/client.h"

namespace farcall::client_internal {

class StopHook {
 public:
  // Runs `on_stop` once, on the thread that stops `a` or `b` (either may be
  // null), or here at once if one is stopped already. `on_stop` must be
  // quick and must not stop a CallStop.
  StopHook(const CallStop* a, const CallStop* b, std::function<void()> on_stop);
  // After it returns, `on_stop` is not running and never will (it may be
  // destroyed from within `on_stop`, on that thread).
  ~StopHook();
  StopHook(const StopHook&) = delete;
  StopHook& operator=(const StopHook&) = delete;

  struct Entry;

 private:
  std::shared_ptr<Entry> entry_;
  std::shared_ptr<CallStop::State> a_, b_;  // where it waits (null: nowhere)
  uint64_t a_id_ = 0, b_id_ = 0;
};

// Whether `a` or `b` (either may be null) is stopped.
bool Stopped(const CallStop* a, const CallStop* b);

// What a stopped call ends with: CANCELLED, "the caller stopped the call."
absl::Status StoppedStatus();

}  // namespace farcall::client_internal

#endif  // FARCALL_CLIENT_CALL_STOP_H_
