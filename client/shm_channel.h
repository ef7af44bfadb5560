// The client's side of the same-host shared-memory path (see
// core/shm_protocol.h): a connection to the agent's socket, and a pool of
// registered memfd regions that calls stage their tensors in.
// Internal to client/.
//
// Thread safety: all methods are thread-safe. A region handed out stays
// with its holder until the last shared_ptr to it is gone, then returns to
// the pool.
#ifndef FARCALL_CLIENT_SHM_CHANNEL_H_
#define FARCALL_CLIENT_SHM_CHANNEL_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace farcall::client_internal {

struct ShmRegion {
  std::string token;
  uint8_t* data = nullptr;
  uint64_t size = 0;
  // Cleared when a call that used the region failed (a deadline, a cancel):
  // the agent may still be writing into it, so it is never handed to
  // another call; it is unregistered when let go instead.
  std::atomic<bool> reusable{true};
  ~ShmRegion();
};

class ShmChannel : public std::enable_shared_from_this<ShmChannel> {
 public:
  // Connects to the agent's shared-memory socket.
  static absl::StatusOr<std::shared_ptr<ShmChannel>> Connect(const std::string& socket);
  ~ShmChannel();  // closing the socket makes the agent drop every region

  // False once the agent closed its end (it stopped or restarted): its
  // regions are gone, and calls must not name them.
  bool Alive();

  // A registered region of at least `size` bytes, reused from the pool when
  // one is free.
  absl::StatusOr<std::shared_ptr<ShmRegion>> Acquire(uint64_t size);

  // A region of `size` bytes for the caller's own tensors
  // (Client::AllocateShared); unregistered when the last holder lets go.
  absl::StatusOr<std::shared_ptr<ShmRegion>> AllocateUser(uint64_t size);
  // The caller's region holding [p, p + n), and p's offset in it.
  std::shared_ptr<ShmRegion> Locate(const void* p, uint64_t n, uint64_t* offset);

 private:
  explicit ShmChannel(int sock) : sock_(sock) {}
  absl::StatusOr<std::unique_ptr<ShmRegion>> Register(uint64_t size);
  void Return(std::unique_ptr<ShmRegion> region);
  // Tells the agent to drop a region; errors are ignored (it drops them all
  // when the client disconnects anyway).
  void Unregister(const std::string& token);

  const int sock_;
  absl::Mutex io_mu_;  // one request/reply on the socket at a time
  absl::Mutex mu_;
  std::vector<std::unique_ptr<ShmRegion>> free_ ABSL_GUARDED_BY(mu_);
  std::vector<std::weak_ptr<ShmRegion>> user_ ABSL_GUARDED_BY(mu_);
};

}  // namespace farcall::client_internal

#endif  // FARCALL_CLIENT_SHM_CHANNEL_H_
