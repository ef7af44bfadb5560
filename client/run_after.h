// Runs a task later, on a thread of the client's own (started as tasks need
// them: a new one whenever all are busy, at most 64): how the client starts
// an asynchronous call's first attempt (when it may block) and its next
// ones. Never on a gRPC thread: an attempt may block (it may ask the target
// what it is first), and a gRPC thread that blocks on gRPC can wait for
// itself (its resolver and connections run on the same few threads) until
// the call's deadline.
//
//   RunAfter(absl::Milliseconds(100), [call] { call->Start(); });
//
// Tasks run in the order they fall due; one that blocks holds one of the
// threads, and the next task gets another. Thread safety: call from any thread; the task keeps what
// it captures alive, and runs unless the process exits first.
#ifndef FARCALL_CLIENT_RUN_AFTER_H_
#define FARCALL_CLIENT_RUN_AFTER_H_

#include <functional>

#include "absl/time/time.h"

namespace farcall::client_internal {

void RunAfter(absl::Duration delay, std::function<void()> task);

}  // namespace farcall::client_internal

#endif  // FARCALL_CLIENT_RUN_AFTER_H_
