// libFuzzer: the shared-memory socket protocol, as the agent reads requests
// from a client (and a client reads replies), from arbitrary bytes.
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>

#include "core/shm_protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 60000) return 0;  // fits the socket buffer: no writer thread needed
  for (int pass = 0; pass < 2; ++pass) {
    int fds[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) return 0;
    size_t done = 0;
    while (done < size) {
      ssize_t w = write(fds[0], data + done, size - done);
      if (w <= 0) break;
      done += static_cast<size_t>(w);
    }
    close(fds[0]);
    if (pass == 0) {
      absl::StatusOr<farcall::shm::Request> r = farcall::shm::ReceiveRequest(fds[1]);
      if (r.ok() && r->fd >= 0) close(r->fd);
    } else {
      (void)farcall::shm::ReceiveReply(fds[1]);
    }
    close(fds[1]);
  }
  return 0;
}
