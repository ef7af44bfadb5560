#include "core/shm_protocol.h"

#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace farcall::shm {
namespace {

absl::Status Gone(const char* what) {
  return absl::UnavailableError(
      absl::StrCat("shared-memory socket ", what, ": ", std::strerror(errno)));
}

bool WriteAll(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    c += w;
    n -= w;
  }
  return true;
}

bool ReadAll(int fd, void* p, size_t n) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    ssize_t r = recv(fd, c, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    c += r;
    n -= r;
  }
  return true;
}

socklen_t FillAddress(const std::string& address, sockaddr_un* a) {
  std::memset(a, 0, sizeof(*a));
  a->sun_family = AF_UNIX;
  std::string path = address;
  size_t offset = 0;
  if (!path.empty() && path[0] == '@') {
    path = path.substr(1);
    offset = 1;  // abstract: leading NUL
  }
  path = path.substr(0, sizeof(a->sun_path) - 1 - offset);
  std::memcpy(a->sun_path + offset, path.data(), path.size());
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + offset + path.size());
}

}  // namespace

absl::Status SendRequest(int sock, const Request& r) {
  char buf[1 + 8 + kTokenSize] = {};
  buf[0] = static_cast<char>(r.op);
  std::memcpy(buf + 1, &r.size, 8);
  std::memcpy(buf + 9, r.token.data(), std::min(r.token.size(), kTokenSize));
  iovec iov{buf, sizeof(buf)};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  char control[CMSG_SPACE(sizeof(int))] = {};
  if (r.fd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &r.fd, sizeof(int));
  }
  ssize_t n;
  do {
    n = sendmsg(sock, &msg, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  if (n != static_cast<ssize_t>(sizeof(buf))) return Gone("send");
  return absl::OkStatus();
}

absl::StatusOr<Request> ReceiveRequest(int sock) {
  char buf[1 + 8 + kTokenSize];
  iovec iov{buf, sizeof(buf)};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  char control[CMSG_SPACE(sizeof(int))] = {};
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n;
  do {
    n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC | MSG_WAITALL);
  } while (n < 0 && errno == EINTR);
  if (n < 0) msg.msg_controllen = 0;
  // The fds first: a short or broken message must not leak those it carried.
  Request r;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      // Take the first fd; close any extra a misbehaving peer sent.
      size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        if (r.fd < 0) {
          r.fd = fd;
        } else {
          close(fd);
        }
      }
    }
  }
  if (n != static_cast<ssize_t>(sizeof(buf))) {
    if (r.fd >= 0) close(r.fd);
    return Gone("receive");
  }
  r.op = static_cast<uint8_t>(buf[0]);
  std::memcpy(&r.size, buf + 1, 8);
  r.token.assign(buf + 9, kTokenSize);
  return r;
}

absl::Status SendReply(int sock, const Reply& r) {
  std::string buf(1 + kTokenSize + 4, '\0');
  buf[0] = static_cast<char>(r.status);
  std::memcpy(buf.data() + 1, r.token.data(), std::min(r.token.size(), kTokenSize));
  uint32_t len = static_cast<uint32_t>(r.message.size());
  std::memcpy(buf.data() + 1 + kTokenSize, &len, 4);
  buf += r.message;
  if (!WriteAll(sock, buf.data(), buf.size())) return Gone("send");
  return absl::OkStatus();
}

absl::StatusOr<Reply> ReceiveReply(int sock) {
  char head[1 + kTokenSize + 4];
  if (!ReadAll(sock, head, sizeof(head))) return Gone("receive");
  Reply r;
  r.status = static_cast<uint8_t>(head[0]);
  r.token.assign(head + 1, kTokenSize);
  uint32_t len;
  std::memcpy(&len, head + 1 + kTokenSize, 4);
  if (len > (1u << 16)) return absl::InternalError("shared-memory reply too long");
  r.message.resize(len);
  if (len > 0 && !ReadAll(sock, r.message.data(), len)) return Gone("receive");
  return r;
}

absl::StatusOr<int> Connect(const std::string& address) {
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return Gone("create");
  sockaddr_un a;
  socklen_t len = FillAddress(address, &a);
  if (connect(s, reinterpret_cast<sockaddr*>(&a), len) != 0) {
    absl::Status st = Gone(absl::StrCat("connect to ", address).c_str());
    close(s);
    return st;
  }
  return s;
}

absl::StatusOr<int> Listen(const std::string& address) {
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return Gone("create");
  sockaddr_un a;
  socklen_t len = FillAddress(address, &a);
  if (address.empty() || address[0] != '@') unlink(address.c_str());
  if (bind(s, reinterpret_cast<sockaddr*>(&a), len) != 0 || listen(s, 64) != 0) {
    absl::Status st = Gone(absl::StrCat("bind ", address).c_str());
    close(s);
    return st;
  }
  return s;
}

std::string NewToken() {
  unsigned char raw[16];
  size_t got = 0;
  while (got < sizeof(raw)) {
    ssize_t n = getrandom(raw + got, sizeof(raw) - got, 0);
    if (n > 0) got += n;
  }
  static const char kHex[] = "0123456789abcdef";
  std::string t;
  for (unsigned char b : raw) {
    t.push_back(kHex[b >> 4]);
    t.push_back(kHex[b & 15]);
  }
  return t;
}

}  // namespace farcall::shm
