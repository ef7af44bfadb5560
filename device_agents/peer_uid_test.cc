#include "device_agents/peer_uid.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace farcall::agent {
namespace {

using ::testing::HasSubstr;

// A connected loopback TCP pair; `client_port` is the client end's port.
struct LoopbackPair {
  int listener = -1, client = -1, server = -1;
  int client_port = 0;
  LoopbackPair() {
    listener = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    listen(listener, 1);
    getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len);
    client = socket(AF_INET, SOCK_STREAM, 0);
    connect(client, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    server = accept(listener, nullptr, nullptr);
    sockaddr_in c{};
    len = sizeof(c);
    getsockname(client, reinterpret_cast<sockaddr*>(&c), &len);
    client_port = ntohs(c.sin_port);
  }
  ~LoopbackPair() {
    close(server);
    close(client);
    close(listener);
  }
};

TEST(LoopbackPeerUidTest, FindsTheUserOfALiveLoopbackClient) {
  LoopbackPair p;
  ASSERT_GT(p.client_port, 0);
  auto uid = LoopbackPeerUid(absl::StrCat("ipv4:127.0.0.1:", p.client_port));
  ASSERT_TRUE(uid.ok()) << uid.status();
  EXPECT_EQ(*uid, geteuid());
  // A closed socket is no longer anybody's.
  const int port = p.client_port;
  close(p.client);
  close(p.server);
  p.client = p.server = -1;
  // (The port may linger in TIME_WAIT, owned by no one: uid 0 then; either
  // way it is not a live client of another user.)
  auto after = LoopbackPeerUid(absl::StrCat("ipv4:127.0.0.1:", port));
  if (after.ok()) EXPECT_EQ(*after, 0u);
}

TEST(LoopbackPeerUidTest, PeersOffThisHostOrOffTcpAreRefused) {
  for (const char* peer : {"ipv4:10.1.2.3:5000", "ipv6:[2001:db8::1]:5000", "unix:/tmp/s",
                           "unix-abstract:x", "ipv4:127.0.0.1", "ipv4:127.0.0.1:99999", ""}) {
    auto uid = LoopbackPeerUid(peer);
    EXPECT_EQ(uid.status().code(), absl::StatusCode::kPermissionDenied) << peer;
    EXPECT_THAT(uid.status().message(),
                HasSubstr("shared memory serves only calls over loopback TCP"));
  }
}

TEST(LoopbackPeerUidTest, ReadsEverySpellingTheKernelTablesUse) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/peer_uid_", getpid());
  std::filesystem::create_directories(dir);
  const char* kHeader = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when "
                        "retrnsmt   uid  timeout inode\n";
  std::ofstream(dir + "/tcp") << kHeader
                              << "   0: 0100007F:1F90 0100007F:C350 01 00000000:00000000 "
                                 "00:00000000 00000000  1234        0 111 1\n";
  std::ofstream(dir + "/tcp6")
      << kHeader
      << "   0: 00000000000000000000000001000000:0050 "
         "00000000000000000000000001000000:C350 01 00000000:00000000 00:00000000 "
         "00000000  4321        0 222 1\n"
      << "   1: 0000000000000000FFFF00000100007F:0051 "
         "0000000000000000FFFF00000100007F:C350 01 00000000:00000000 00:00000000 "
         "00000000  77        0 333 1\n";
  EXPECT_EQ(LoopbackPeerUid("ipv4:127.0.0.1:8080", dir).value_or(0), 1234u);
  EXPECT_EQ(LoopbackPeerUid("ipv6:[::1]:80", dir).value_or(0), 4321u);
  EXPECT_EQ(LoopbackPeerUid("ipv6:%5B::1%5D:80", dir).value_or(0), 4321u);
  // A v4 client on a dual-stack socket is listed in tcp6, mapped.
  EXPECT_EQ(LoopbackPeerUid("ipv4:127.0.0.1:81", dir).value_or(0), 77u);
  EXPECT_EQ(LoopbackPeerUid("ipv6:[::ffff:127.0.0.1]:8080", dir).value_or(0), 1234u);
  EXPECT_EQ(LoopbackPeerUid("ipv4:127.0.0.1:9", dir).status().code(),
            absl::StatusCode::kNotFound);
  std::filesystem::remove_all(dir);
}

TEST(PeerUidCacheTest, AnswersLikeTheKernel) {
  LoopbackPair p;
  PeerUidCache cache;
  const std::string peer = absl::StrCat("ipv4:127.0.0.1:", p.client_port);
  EXPECT_EQ(cache.Get(peer).value_or(99999), geteuid());
  EXPECT_EQ(cache.Get(peer).value_or(99999), geteuid());
  EXPECT_EQ(cache.Get("ipv4:192.0.2.1:1").status().code(), absl::StatusCode::kPermissionDenied);
}

}  // namespace
}  // namespace farcall::agent
