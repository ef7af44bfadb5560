// The agent's side of the same-host shared-memory path: a Unix-domain socket
// where clients pass memfds (core/shm_protocol.h), and the regions mapped
// from them, found by token.
//
// Thread safety: all methods are thread-safe. A region stays mapped while a
// call holds it, even after its client unregistered it or went away.
#ifndef FARCALL_DEVICE_AGENTS_SHM_SERVICE_H_
#define FARCALL_DEVICE_AGENTS_SHM_SERVICE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "device_agents/peer_uid.h"

namespace farcall::agent {

class ShmRegion {
 public:
  ShmRegion(uint8_t* data, uint64_t size) : data_(data), size_(size) {}
  // Lets go of what KeepWhileMapped holds, then unmaps.
  ~ShmRegion();
  uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  // What `key` (a device) made for this region, made by `make` on first use
  // and kept until the region goes (a device's pinning of it): made once
  // per region and key, however many calls use it. A failure is kept too,
  // so that it is not tried for every call.
  absl::StatusOr<std::shared_ptr<void>> KeepWhileMapped(
      const void* key, const std::function<absl::StatusOr<std::shared_ptr<void>>()>& make);

 private:
  uint8_t* data_;
  uint64_t size_;
  absl::Mutex mu_;
  std::map<const void*, absl::StatusOr<std::shared_ptr<void>>> kept_ ABSL_GUARDED_BY(mu_);
};

class ShmService {
 public:
  struct Options {
    // Peers (by SO_PEERCRED) whose regions are served: the agent's own user
    // always, and these uids too.
    std::vector<uint32_t> allowed_uids;
    // Connections served at once; more are refused until one closes.
    size_t max_connections = 256;
    // Bytes one connection may have registered at once (--shm_max_bytes).
    uint64_t max_bytes_per_connection = uint64_t{64} << 30;
  };
  // Listens on `address` ("@name": abstract socket; else a path).
  static absl::StatusOr<std::unique_ptr<ShmService>> Start(const std::string& address,
                                                           Options options);
  ~ShmService();

  const std::string& address() const { return address_; }
  // The region registered under `token`, for a call from `peer` (gRPC's
  // peer string). A region serves only calls over loopback TCP from the
  // user whose process registered it: PERMISSION_DENIED from elsewhere,
  // NOT_FOUND for a token that is unknown or another user's. The token's
  // secret part is compared in constant time.
  absl::StatusOr<std::shared_ptr<ShmRegion>> Find(const std::string& token,
                                                  const std::string& peer);
  int64_t region_count() const;
  // The agent's gRPC port, once it serves: a call's socket must be connected
  // to it (LoopbackPeerUid).
  void set_server_port(int port) { server_port_.store(port); }

 private:
  ShmService(std::string address, int listen_fd, Options options);
  void AcceptLoop();
  void Serve(int fd, uint32_t uid);
  // Answers the peer's first request with `error`, then closes.
  static void Refuse(int fd, const absl::Status& error);

  const std::string address_;
  const int listen_fd_;
  const Options options_;
  std::thread acceptor_;
  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::map<int, std::thread> connections_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> finished_ ABSL_GUARDED_BY(mu_);
  // A token is an id, for finding the region, and a secret, compared in
  // constant time.
  struct Registered {
    std::string secret;
    int connection;  // the socket it came on
    uint32_t uid;    // the user of the process that registered it
    std::shared_ptr<ShmRegion> region;
  };
  std::map<std::string, Registered> regions_ ABSL_GUARDED_BY(mu_);  // by token id
  std::atomic<int> server_port_{0};
};

}  // namespace farcall::agent

#endif  // FARCALL_DEVICE_AGENTS_SHM_SERVICE_H_
