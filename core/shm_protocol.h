// The same-host shared-memory side channel between a client and an agent.
//
// Layers:
//   1. A client creates a memfd, seals it against shrinking, maps it, and
//      passes the fd to the agent over the agent's Unix-domain socket
//      (SCM_RIGHTS). The agent maps it and answers with a random 128-bit
//      token. Only a client that passed a region itself learns its token;
//      regions are never opened by name.
//   2. A gRPC call then names the token and offsets in CallHeader.shm
//      instead of sending chunks; the agent reads args from the region and
//      writes results into it.
//   3. The agent unmaps a region when the client unregisters it or closes
//      the socket.
//
// Messages on the socket (little-endian, one request, one reply):
//   request  = op:u8 (1 register, 2 unregister), size:u64, token:char[32]
//              (register carries the fd as SCM_RIGHTS and ignores token)
//   reply    = status:u8 (0 ok), token:char[32], message_len:u32, message
#ifndef FARCALL_CORE_SHM_PROTOCOL_H_
#define FARCALL_CORE_SHM_PROTOCOL_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace farcall::shm {

inline constexpr uint8_t kOpRegister = 1;
inline constexpr uint8_t kOpUnregister = 2;
inline constexpr size_t kTokenSize = 32;  // hex of 128 random bits

struct Request {
  uint8_t op = 0;
  uint64_t size = 0;
  std::string token;  // kTokenSize chars, or empty
  int fd = -1;        // received or to send; owned by the caller
};

struct Reply {
  uint8_t status = 0;  // an absl::StatusCode
  std::string token;
  std::string message;
};

// Blocking I/O on a connected Unix-domain stream socket. UNAVAILABLE when
// the peer is gone.
absl::Status SendRequest(int sock, const Request& r);
absl::StatusOr<Request> ReceiveRequest(int sock);
absl::Status SendReply(int sock, const Reply& r);
absl::StatusOr<Reply> ReceiveReply(int sock);

// "@name" is an abstract socket (shared by containers of one pod, which
// share a network namespace); anything else is a path.
absl::StatusOr<int> Connect(const std::string& address);
absl::StatusOr<int> Listen(const std::string& address);

// A fresh random token.
std::string NewToken();

}  // namespace farcall::shm

#endif  // FARCALL_CORE_SHM_PROTOCOL_H_
