#include "client/shm_channel.h"

#include <poll.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/shm_protocol.h"

namespace farcall::client_internal {
namespace {
// Regions are rounded up to this, so that calls of similar size reuse them.
constexpr uint64_t kGranule = uint64_t{1} << 20;
// Free regions kept for reuse.
constexpr size_t kMaxFree = 4;
}  // namespace

ShmRegion::~ShmRegion() {
  if (data != nullptr) munmap(data, size);
}

absl::StatusOr<std::shared_ptr<ShmChannel>> ShmChannel::Connect(const std::string& socket) {
  absl::StatusOr<int> fd = shm::Connect(socket);
  if (!fd.ok()) return fd.status();
  return std::shared_ptr<ShmChannel>(new ShmChannel(*fd));
}

ShmChannel::~ShmChannel() { close(sock_); }

bool ShmChannel::Alive() {
  // The agent never writes unasked, so with no request in flight anything
  // readable, or a hang-up, means that it closed the socket.
  absl::MutexLock l(&io_mu_);
  pollfd p{sock_, POLLIN | POLLRDHUP, 0};
  return poll(&p, 1, 0) == 0;
}

absl::StatusOr<std::unique_ptr<ShmRegion>> ShmChannel::Register(uint64_t size) {
  int fd = memfd_create("farcall-shm", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return absl::ResourceExhaustedError("memfd_create failed.");
  // Sealed against shrinking: the agent refuses regions that could shrink
  // under it.
  if (ftruncate(fd, static_cast<off_t>(size)) != 0 ||
      fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_SEAL) != 0) {
    close(fd);
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot size a ", size, "-byte shared-memory region."));
  }
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    close(fd);
    return absl::ResourceExhaustedError(absl::StrCat("cannot map ", size, " bytes."));
  }
  auto region = std::make_unique<ShmRegion>();
  region->data = static_cast<uint8_t*>(p);
  region->size = size;
  shm::Request req;
  req.op = shm::kOpRegister;
  req.size = size;
  req.fd = fd;
  absl::StatusOr<shm::Reply> reply;
  {
    absl::MutexLock l(&io_mu_);
    absl::Status sent = shm::SendRequest(sock_, req);
    reply = sent.ok() ? shm::ReceiveReply(sock_) : absl::StatusOr<shm::Reply>(sent);
  }
  close(fd);  // the agent holds its own copy now
  if (!reply.ok()) return reply.status();
  if (reply->status != 0) {
    return absl::Status(static_cast<absl::StatusCode>(reply->status), reply->message);
  }
  region->token = reply->token;
  return region;
}

absl::StatusOr<std::shared_ptr<ShmRegion>> ShmChannel::Acquire(uint64_t size) {
  size = std::max<uint64_t>((size + kGranule - 1) / kGranule * kGranule, kGranule);
  std::unique_ptr<ShmRegion> region;
  {
    absl::MutexLock l(&mu_);
    auto it =
        std::find_if(free_.begin(), free_.end(), [&](const auto& r) { return r->size >= size; });
    if (it != free_.end()) {
      region = std::move(*it);
      free_.erase(it);
    }
  }
  if (region == nullptr) {
    absl::StatusOr<std::unique_ptr<ShmRegion>> fresh = Register(size);
    if (!fresh.ok()) return fresh.status();
    region = *std::move(fresh);
  }
  std::weak_ptr<ShmChannel> self = weak_from_this();
  ShmRegion* raw = region.release();
  return std::shared_ptr<ShmRegion>(raw, [self](ShmRegion* r) {
    std::unique_ptr<ShmRegion> owned(r);
    if (auto channel = self.lock()) channel->Return(std::move(owned));
  });
}

absl::StatusOr<std::shared_ptr<ShmRegion>> ShmChannel::AllocateUser(uint64_t size) {
  absl::StatusOr<std::unique_ptr<ShmRegion>> fresh = Register(size);
  if (!fresh.ok()) return fresh.status();
  std::weak_ptr<ShmChannel> self = weak_from_this();
  std::shared_ptr<ShmRegion> region((*fresh).release(), [self](ShmRegion* r) {
    std::unique_ptr<ShmRegion> owned(r);
    if (auto channel = self.lock()) channel->Unregister(owned->token);
  });
  absl::MutexLock l(&mu_);
  std::erase_if(user_, [](const auto& w) { return w.expired(); });
  user_.push_back(region);
  return region;
}

std::shared_ptr<ShmRegion> ShmChannel::Locate(const void* p, uint64_t n, uint64_t* offset) {
  const uint8_t* b = static_cast<const uint8_t*>(p);
  absl::MutexLock l(&mu_);
  for (const auto& w : user_) {
    std::shared_ptr<ShmRegion> r = w.lock();
    if (r != nullptr && b >= r->data && n <= r->size &&
        static_cast<uint64_t>(b - r->data) <= r->size - n) {
      *offset = static_cast<uint64_t>(b - r->data);
      return r;
    }
  }
  return nullptr;
}

void ShmChannel::Return(std::unique_ptr<ShmRegion> region) {
  if (region->reusable.load()) {
    absl::MutexLock l(&mu_);
    if (free_.size() < kMaxFree) {
      free_.push_back(std::move(region));
      return;
    }
    // Too many cached: keep the larger ones.
    auto smallest = std::min_element(
        free_.begin(), free_.end(), [](const auto& a, const auto& b) { return a->size < b->size; });
    if ((*smallest)->size < region->size) std::swap(*smallest, region);
  }
  Unregister(region->token);
}

void ShmChannel::Unregister(const std::string& token) {
  shm::Request req;
  req.op = shm::kOpUnregister;
  req.token = token;
  absl::MutexLock l(&io_mu_);
  if (shm::SendRequest(sock_, req).ok()) (void)shm::ReceiveReply(sock_);
}

}  // namespace farcall::client_internal
