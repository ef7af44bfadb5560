// The agent's side of the same-host shared-memory path: a Unix-domain socket
// where clients pass memfds (core/shm_protocol.h), and the regions mapped
// from them, found by token.
//
// Thread safety: all methods are thread-safe. A region stays mapped while a
// call holds it, even after its client unregistered it or went away.
#ifndef FARCALL_DEVICE_AGENTS_SHM_SERVICE_H_
#define FARCALL_DEVICE_AGENTS_SHM_SERVICE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace farcall::agent {

class ShmRegion {
 public:
  ShmRegion(uint8_t* data, uint64_t size) : data_(data), size_(size) {}
  ~ShmRegion();
  uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  uint8_t* data_;
  uint64_t size_;
};

class ShmService {
 public:
  struct Options {
    // Peers (by SO_PEERCRED) whose regions are served: the agent's own user
    // always, and these uids too.
    std::vector<uint32_t> allowed_uids;
    // Connections served at once; more are refused until one closes.
    size_t max_connections = 256;
  };
  // Listens on `address` ("@name": abstract socket; else a path).
  static absl::StatusOr<std::unique_ptr<ShmService>> Start(const std::string& address,
                                                           Options options);
  ~ShmService();

  const std::string& address() const { return address_; }
  // The region registered under `token`, or NOT_FOUND.
  absl::StatusOr<std::shared_ptr<ShmRegion>> Find(const std::string& token) const;
  int64_t region_count() const;

 private:
  ShmService(std::string address, int listen_fd, Options options);
  void AcceptLoop();
  void Serve(int fd);
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
  // token -> region, and which connection registered it.
  std::map<std::string, std::pair<int, std::shared_ptr<ShmRegion>>> regions_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace farcall::agent

#endif  // FARCALL_DEVICE_AGENTS_SHM_SERVICE_H_
