// Which local user is at the other end of a gRPC connection, so that a
// shared-memory region is used only by calls from the user that registered
// it. gRPC names a TCP peer by address ("ipv4:127.0.0.1:40312"); on loopback
// that address is the client's own socket, which the kernel lists with its
// owner.
//
// Thread safety: thread-safe.
#ifndef FARCALL_DEVICE_AGENTS_PEER_UID_H_
#define FARCALL_DEVICE_AGENTS_PEER_UID_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace farcall::agent {

// The uid owning the loopback TCP socket `peer` (gRPC's peer string): the
// one established socket whose local end is that address, connected to
// `server_port` (any port when 0). Asked of the kernel each time
// (NETLINK_SOCK_DIAG, or the /proc/net/tcp{,6} tables where netlink is not
// there), never remembered: once a connection closes, its port may be
// bound by anybody.
// PERMISSION_DENIED when the peer is not a loopback TCP address (another
// host, or a Unix socket); NOT_FOUND when no such socket is open, or when
// sockets of different users match (it cannot be told whose the call is).
// A non-empty `proc_net` reads the tables there instead (tests).
absl::StatusOr<uint32_t> LoopbackPeerUid(absl::string_view peer, int server_port = 0,
                                         const std::string& proc_net = "");

}  // namespace farcall::agent

#endif  // FARCALL_DEVICE_AGENTS_PEER_UID_H_
