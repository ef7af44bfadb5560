#include "core/shm_protocol.h"

#include <dirent.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "gtest/gtest.h"

namespace farcall::shm {
namespace {

int OpenFds() {
  int n = 0;
  DIR* d = opendir("/proc/self/fd");
  while (readdir(d) != nullptr) ++n;
  closedir(d);
  return n;
}

// Sends `bytes` of a request with `fd` attached, then closes the sender.
void SendRaw(int sock, size_t bytes, int fd) {
  char buf[64] = {kOpRegister};
  iovec iov{buf, bytes};
  char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  ASSERT_EQ(sendmsg(sock, &msg, 0), static_cast<ssize_t>(bytes));
  close(sock);
}

TEST(ShmProtocolTest, AShortMessageLeaksNoneOfTheFdsItCarried) {
  int fd = memfd_create("t", 0);
  ASSERT_GE(fd, 0);
  int socks[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, socks), 0);
  SendRaw(socks[0], 5, fd);
  close(fd);
  const int before = OpenFds();
  EXPECT_FALSE(ReceiveRequest(socks[1]).ok());
  EXPECT_EQ(OpenFds(), before);  // the passed fd was closed, not left open
  close(socks[1]);
}

TEST(ShmProtocolTest, AWholeRequestHandsItsFdToTheCaller) {
  int fd = memfd_create("t", 0);
  int socks[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, socks), 0);
  SendRaw(socks[0], 1 + 8 + kTokenSize, fd);
  close(fd);
  absl::StatusOr<Request> r = ReceiveRequest(socks[1]);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->op, kOpRegister);
  ASSERT_GE(r->fd, 0);
  close(r->fd);
  close(socks[1]);
}

}  // namespace
}  // namespace farcall::shm
