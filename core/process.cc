#include "core/process.h"

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

#include <signal.h>
#include <string.h>
#include <unistd.h>

#include <string>

namespace farcall {
namespace {
sigset_t TerminationSet() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  return set;
}
}  // namespace

void InitFarcallProcess() { absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore); }

void BlockTerminationSignals() {
  sigset_t set = TerminationSet();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

std::string WaitForTerminationSignal(const std::function<void(bool hangup)>& tick,
                                     absl::Duration period) {
  sigset_t set = TerminationSet();
  for (;;) {
    const int64_t ns = absl::ToInt64Nanoseconds(period);
    timespec t{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
    const int sig = sigtimedwait(&set, nullptr, &t);
    if (sig == SIGINT) return "SIGINT";
    if (sig == SIGTERM) return "SIGTERM";
    // SIGHUP, or the period ran out (sig < 0: EAGAIN, or EINTR).
    if (tick) tick(sig == SIGHUP);
  }
}

void ReportReady(int fd, int port, int metrics_port) {
  if (fd < 0) return;
  std::string line =
      metrics_port > 0 ? absl::StrCat(port, " ", metrics_port, "\n") : absl::StrCat(port, "\n");
  ssize_t unused = write(fd, line.data(), line.size());
  (void)unused;
  close(fd);
}

}  // namespace farcall
