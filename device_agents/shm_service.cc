#include "device_agents/shm_service.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <system_error>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/shm_protocol.h"
#include "core/tokens.h"
#include "device_agents/agent_metrics.h"

namespace farcall::agent {
namespace {

// Regions one connection may hold at once.
constexpr size_t kMaxRegionsPerConnection = 1024;
// A token's first hex digits name its region; the rest are its secret.
constexpr size_t kTokenIdSize = 8;

shm::Reply Error(absl::StatusCode code, std::string message) {
  shm::Reply r;
  r.status = static_cast<uint8_t>(code);
  r.message = std::move(message);
  return r;
}

// Maps a client's fd after checking that it cannot shrink under us: a
// shrunk file would turn the agent's next access into SIGBUS. The seals come
// first: a size read before them could be shrunk away before the check.
absl::StatusOr<std::shared_ptr<ShmRegion>> MapRegion(int fd, uint64_t size) {
  constexpr int kSeals = F_SEAL_SHRINK | F_SEAL_SEAL;
  int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & kSeals) != kSeals) {
    return absl::FailedPreconditionError(
        "a shared-memory region must be a memfd sealed with F_SEAL_SHRINK and "
        "F_SEAL_SEAL.");
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    return absl::InvalidArgumentError("the passed fd cannot be inspected.");
  }
  if (size == 0 || static_cast<uint64_t>(st.st_size) < size) {
    return absl::InvalidArgumentError(
        absl::StrCat("the region claims ", size, " bytes but its memfd holds ", st.st_size, "."));
  }
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot map ", size, " bytes."));
  }
  Metrics().shm_mapped_bytes.With({}).Increment(static_cast<double>(size));
  return std::make_shared<ShmRegion>(static_cast<uint8_t*>(p), size);
}

}  // namespace

ShmRegion::~ShmRegion() {
  {
    // Devices unpin the memory while it is still mapped.
    absl::MutexLock l(&mu_);
    kept_.clear();
  }
  munmap(data_, size_);
  Metrics().shm_mapped_bytes.With({}).Decrement(static_cast<double>(size_));
}

absl::StatusOr<std::shared_ptr<void>> ShmRegion::KeepWhileMapped(
    const void* key, const std::function<absl::StatusOr<std::shared_ptr<void>>()>& make) {
  absl::MutexLock l(&mu_);
  auto it = kept_.find(key);
  if (it == kept_.end()) it = kept_.emplace(key, make()).first;
  return it->second;
}

absl::StatusOr<std::unique_ptr<ShmService>> ShmService::Start(const std::string& address,
                                                              Options options) {
  absl::StatusOr<int> fd = shm::Listen(address);
  if (!fd.ok()) return fd.status();
  std::unique_ptr<ShmService> s(new ShmService(address, *fd, std::move(options)));
  s->acceptor_ = std::thread([p = s.get()] { p->AcceptLoop(); });
  return s;
}

ShmService::ShmService(std::string address, int listen_fd, Options options)
    : address_(std::move(address)), listen_fd_(listen_fd), options_(std::move(options)) {}

void ShmService::Refuse(int fd, const absl::Status& error) {
  // Read the first request, so that the peer gets the answer, not a reset;
  // a peer that sends nothing holds the accept loop for 200 ms at most.
  struct timeval tv {
    0, 200 * 1000
  };
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  absl::StatusOr<shm::Request> req = shm::ReceiveRequest(fd);
  if (req.ok() && req->fd >= 0) close(req->fd);
  (void)shm::SendReply(fd, Error(error.code(), std::string(error.message())));
  close(fd);
}

ShmService::~ShmService() {
  std::map<int, std::thread> conns;
  {
    absl::MutexLock l(&mu_);
    stopping_ = true;
    for (auto& [fd, t] : connections_) shutdown(fd, SHUT_RDWR);
  }
  shutdown(listen_fd_, SHUT_RDWR);
  acceptor_.join();
  close(listen_fd_);
  {
    absl::MutexLock l(&mu_);
    conns = std::move(connections_);
    for (std::thread& t : finished_) t.join();
    finished_.clear();
  }
  for (auto& [fd, t] : conns) t.join();
  if (!address_.empty() && address_[0] != '@') unlink(address_.c_str());
}

void ShmService::AcceptLoop() {
  for (;;) {
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    const int accept_errno = errno;
    {
      absl::MutexLock l(&mu_);
      // Join connection threads that ended, so they do not pile up.
      for (std::thread& t : finished_) t.join();
      finished_.clear();
      if (stopping_) {
        if (fd >= 0) close(fd);
        return;
      }
    }
    if (fd < 0) {
      // Out of file descriptors (or memory): back off instead of spinning.
      if (accept_errno == EMFILE || accept_errno == ENFILE || accept_errno == ENOMEM ||
          accept_errno == ENOBUFS) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      continue;
    }
    // Only the agent's own user, or uids allowed by flag, may hand it memory.
    struct ucred cred {};
    socklen_t len = sizeof(cred);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
      close(fd);
      continue;
    }
    const bool allowed = cred.uid == geteuid() ||
                         std::find(options_.allowed_uids.begin(), options_.allowed_uids.end(),
                                   cred.uid) != options_.allowed_uids.end();
    if (!allowed) {
      Refuse(fd, absl::PermissionDeniedError(
                     absl::StrCat("this agent's shared memory serves its own user (uid ", geteuid(),
                                  ") and --shm_allow_uids, not uid ", cred.uid, ".")));
      continue;
    }
    bool full = false;
    {
      absl::MutexLock l(&mu_);
      full = connections_.size() >= options_.max_connections;
      if (!full) {
        try {
          connections_.emplace(fd, std::thread([this, fd, uid = cred.uid] { Serve(fd, uid); }));
        } catch (const std::system_error&) {
          // No thread for it: refuse this client, keep serving the others.
          close(fd);
        }
      }
    }
    if (full) {
      Refuse(fd, absl::ResourceExhaustedError(absl::StrCat("this agent serves at most ",
                                                           options_.max_connections,
                                                           " shared-memory connections at once.")));
    }
  }
}

void ShmService::Serve(int fd, uint32_t uid) {
  size_t held = 0;
  uint64_t held_bytes = 0;
  for (;;) {
    absl::StatusOr<shm::Request> req = shm::ReceiveRequest(fd);
    if (!req.ok()) break;  // the client went away
    shm::Reply reply;
    if (req->op == shm::kOpRegister) {
      if (req->fd < 0) {
        reply = Error(absl::StatusCode::kInvalidArgument, "register carries no fd.");
      } else if (held >= kMaxRegionsPerConnection) {
        reply = Error(
            absl::StatusCode::kResourceExhausted,
            absl::StrCat("a connection may hold at most ", kMaxRegionsPerConnection, " regions."));
      } else if (req->size > options_.max_bytes_per_connection - held_bytes) {
        reply = Error(
            absl::StatusCode::kResourceExhausted,
            absl::StrCat("a connection may register at most ", options_.max_bytes_per_connection,
                         " bytes of shared memory (--shm_max_bytes); it holds ", held_bytes,
                         " and asks for ", req->size, " more."));
      } else {
        absl::StatusOr<std::shared_ptr<ShmRegion>> region = MapRegion(req->fd, req->size);
        if (!region.ok()) {
          reply = Error(region.status().code(), std::string(region.status().message()));
        } else {
          absl::MutexLock l(&mu_);
          do {
            reply.token = shm::NewToken();
          } while (regions_.count(reply.token.substr(0, kTokenIdSize)) != 0);
          regions_[reply.token.substr(0, kTokenIdSize)] =
              Registered{reply.token.substr(kTokenIdSize), fd, uid, *std::move(region)};
          ++held;
          held_bytes += req->size;
          Metrics().shm_regions.With({}).Set(static_cast<double>(regions_.size()));
        }
      }
    } else if (req->op == shm::kOpUnregister) {
      absl::MutexLock l(&mu_);
      auto it = regions_.find(req->token.substr(0, kTokenIdSize));
      if (it == regions_.end() || it->second.connection != fd ||
          !ConstantTimeEqual(
              it->second.secret,
              absl::string_view(req->token).substr(std::min(kTokenIdSize, req->token.size())))) {
        reply = Error(absl::StatusCode::kNotFound, "no such region on this connection.");
      } else {
        held_bytes -= it->second.region->size();
        regions_.erase(it);
        --held;
        Metrics().shm_regions.With({}).Set(static_cast<double>(regions_.size()));
      }
    } else {
      reply = Error(absl::StatusCode::kInvalidArgument, "unknown shared-memory request.");
    }
    if (req->fd >= 0) close(req->fd);  // mapped, or refused: not needed either way
    if (!shm::SendReply(fd, reply).ok()) break;
  }
  absl::MutexLock l(&mu_);
  // The client is gone: its regions go too (calls still running keep theirs
  // mapped until they finish).
  for (auto it = regions_.begin(); it != regions_.end();) {
    it = it->second.connection == fd ? regions_.erase(it) : std::next(it);
  }
  Metrics().shm_regions.With({}).Set(static_cast<double>(regions_.size()));
  close(fd);
  auto self = connections_.find(fd);
  if (self != connections_.end()) {
    finished_.push_back(std::move(self->second));
    connections_.erase(self);
  }
}

absl::StatusOr<std::shared_ptr<ShmRegion>> ShmService::Find(const std::string& token,
                                                            const std::string& peer) {
  absl::StatusOr<uint32_t> uid = LoopbackPeerUid(peer, server_port_.load());
  if (!uid.ok()) return uid.status();
  absl::MutexLock l(&mu_);
  // Unknown, or another user's: the same answer, which does not echo the
  // token (a secret) or say whether it exists.
  auto it = token.size() == shm::kTokenSize ? regions_.find(token.substr(0, kTokenIdSize))
                                            : regions_.end();
  if (it == regions_.end() || !ConstantTimeEqual(it->second.secret, token.substr(kTokenIdSize)) ||
      it->second.uid != *uid) {
    return absl::NotFoundError(
        "the call names a shared-memory region this agent does not hold for its caller "
        "(regions end when their client disconnects or the agent restarts).");
  }
  return it->second.region;
}

int64_t ShmService::region_count() const {
  absl::MutexLock l(&mu_);
  return static_cast<int64_t>(regions_.size());
}

}  // namespace farcall::agent
