// Which local user is at the other end of a gRPC connection, so that a
// shared-memory region is used only by calls from the user that registered
// it. gRPC names a TCP peer by address ("ipv4:127.0.0.1:40312"); on loopback
// that address is the client's own socket, which the kernel lists with its
// owner in /proc/net/tcp and /proc/net/tcp6.
//
// Thread safety: PeerUidCache is thread-safe.
#ifndef FARCALL_DEVICE_AGENTS_PEER_UID_H_
#define FARCALL_DEVICE_AGENTS_PEER_UID_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace farcall::agent {

// The uid owning the loopback TCP socket `peer` (gRPC's peer string).
// PERMISSION_DENIED when the peer is not a loopback TCP address (another
// host, or a Unix socket); NOT_FOUND when no such socket is listed (it has
// closed). `proc_net` is where tcp and tcp6 are read (tests pass their own).
absl::StatusOr<uint32_t> LoopbackPeerUid(absl::string_view peer,
                                        const std::string& proc_net = "/proc/net");

// LoopbackPeerUid with the answers kept for `ttl`: a connection's peer
// address stays its own while it is open, and a call should not read the
// kernel's socket tables each time.
class PeerUidCache {
 public:
  explicit PeerUidCache(absl::Duration ttl = absl::Seconds(1)) : ttl_(ttl) {}
  absl::StatusOr<uint32_t> Get(const std::string& peer);

 private:
  const absl::Duration ttl_;
  absl::Mutex mu_;
  std::map<std::string, std::pair<uint32_t, absl::Time>> known_ ABSL_GUARDED_BY(mu_);
};

}  // namespace farcall::agent

#endif  // FARCALL_DEVICE_AGENTS_PEER_UID_H_
