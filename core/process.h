// Process plumbing shared by the farcall binaries.
#ifndef FARCALL_CORE_PROCESS_H_
#define FARCALL_CORE_PROCESS_H_

#include <functional>
#include <string>

#include "absl/time/time.h"

namespace farcall {

// Process-wide settings for farcall's binaries; call first in main.
// Turns off absl::Mutex deadlock detection, which Debian's Abseil build
// leaves on and which costs every lock a graph update on the data path.
void InitFarcallProcess();

// Blocks SIGINT, SIGTERM and SIGHUP in the calling thread (call it first in
// main, before other threads start, so they inherit the mask).
void BlockTerminationSignals();
// Waits for SIGINT or SIGTERM; returns the signal's name. Meanwhile runs
// `tick(true)` at each SIGHUP (reload now) and `tick(false)` every `period`
// (look for changed files), on the calling thread; SIGHUP never ends the
// process.
std::string WaitForTerminationSignal(const std::function<void(bool hangup)>& tick = nullptr,
                                     absl::Duration period = absl::Seconds(2));

// Writes "PORT\n" (or "PORT METRICS_PORT\n" when metrics_port > 0) to file
// descriptor `fd` and closes it, so that a parent that started this process
// on port 0 learns the ports without polling. Does nothing for fd < 0.
void ReportReady(int fd, int port, int metrics_port = 0);

}  // namespace farcall

#endif  // FARCALL_CORE_PROCESS_H_
