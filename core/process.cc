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
  return set;
}
}  // namespace

void InitFarcallProcess() { absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore); }

void BlockTerminationSignals() {
  sigset_t set = TerminationSet();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

std::string WaitForTerminationSignal() {
  sigset_t set = TerminationSet();
  int sig = 0;
  sigwait(&set, &sig);
  return sig == SIGINT ? "SIGINT" : "SIGTERM";
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
