#include "device_agents/peer_uid.h"

#include <arpa/inet.h>
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

// A connected loopback TCP pair; `client_port` is the client end's port,
// `server_port` the listener's.
struct LoopbackPair {
  int listener = -1, client = -1, server = -1;
  int client_port = 0, server_port = 0;
  std::string client_peer;  // as gRPC would name the client
  // Listens on 127.0.0.1, or on `server_address` (host order).
  explicit LoopbackPair(uint32_t server_address = INADDR_LOOPBACK) {
    listener = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(server_address);
    socklen_t len = sizeof(a);
    bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    listen(listener, 1);
    getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len);
    server_port = ntohs(a.sin_port);
    client = socket(AF_INET, SOCK_STREAM, 0);
    connect(client, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    server = accept(listener, nullptr, nullptr);
    sockaddr_in c{};
    len = sizeof(c);
    getsockname(client, reinterpret_cast<sockaddr*>(&c), &len);
    client_port = ntohs(c.sin_port);
    char ip[INET_ADDRSTRLEN] = "";
    inet_ntop(AF_INET, &c.sin_addr, ip, sizeof(ip));
    client_peer = absl::StrCat("ipv4:", ip, ":", client_port);
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
  const std::string peer = absl::StrCat("ipv4:127.0.0.1:", p.client_port);
  auto uid = LoopbackPeerUid(peer);
  ASSERT_TRUE(uid.ok()) << uid.status();
  EXPECT_EQ(*uid, geteuid());
  // Connected to the server's port, and to no other.
  EXPECT_EQ(LoopbackPeerUid(peer, p.server_port).value_or(99999), geteuid());
  EXPECT_EQ(LoopbackPeerUid(peer, p.server_port == 1 ? 2 : 1).status().code(),
            absl::StatusCode::kNotFound);
  // The kernel's tables say the same as its netlink answer.
  EXPECT_EQ(LoopbackPeerUid(peer, p.server_port, "/proc/net").value_or(99999), geteuid());
  // A closed client is nobody's, though its port may linger in TIME_WAIT,
  // and nothing of the answer above is remembered for whoever binds the
  // port next.
  close(p.client);
  close(p.server);
  p.client = p.server = -1;
  EXPECT_EQ(LoopbackPeerUid(peer).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(LoopbackPeerUid(peer, 0, "/proc/net").status().code(), absl::StatusCode::kNotFound);
}

TEST(LoopbackPeerUidTest, AClientOfAnotherLoopbackAddressIsFoundToo) {
  // The kernel's lookup of one connection needs the server's address too;
  // for one other than the client's own or 127.0.0.1 every socket is read.
  LoopbackPair p(0x7f000002);  // 127.0.0.2
  ASSERT_GT(p.client_port, 0);
  EXPECT_EQ(LoopbackPeerUid(p.client_peer, p.server_port).value_or(99999), geteuid())
      << p.client_peer;
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
  const char* kHeader =
      "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when "
      "retrnsmt   uid  timeout inode\n";
  std::ofstream(dir + "/tcp") << kHeader
                              << "   0: 0100007F:1F90 0100007F:C350 01 00000000:00000000 "
                                 "00:00000000 00000000  1234        0 111 1\n"
                              // TIME_WAIT (06): a closed socket, nobody's
                              << "   1: 0100007F:1F91 0100007F:C350 06 00000000:00000000 "
                                 "00:00000000 00000000     0        0 0 1\n"
                              // one local end, connected to two servers
                              << "   2: 0100007F:1F92 0100007F:C350 01 00000000:00000000 "
                                 "00:00000000 00000000  1234        0 112 1\n"
                              << "   3: 0100007F:1F92 0200007F:C351 01 00000000:00000000 "
                                 "00:00000000 00000000  5678        0 113 1\n";
  std::ofstream(dir + "/tcp6")
      << kHeader
      << "   0: 00000000000000000000000001000000:0050 "
         "00000000000000000000000001000000:C350 01 00000000:00000000 00:00000000 "
         "00000000  4321        0 222 1\n"
      << "   1: 0000000000000000FFFF00000100007F:0051 "
         "0000000000000000FFFF00000100007F:C350 01 00000000:00000000 00:00000000 "
         "00000000  77        0 333 1\n";
  EXPECT_EQ(LoopbackPeerUid("ipv4:127.0.0.1:8080", 0, dir).value_or(0), 1234u);
  EXPECT_EQ(LoopbackPeerUid("ipv6:[::1]:80", 0, dir).value_or(0), 4321u);
  EXPECT_EQ(LoopbackPeerUid("ipv6:%5B::1%5D:80", 0, dir).value_or(0), 4321u);
  // A v4 client on a dual-stack socket is listed in tcp6, mapped.
  EXPECT_EQ(LoopbackPeerUid("ipv4:127.0.0.1:81", 0, dir).value_or(0), 77u);
  EXPECT_EQ(LoopbackPeerUid("ipv6:[::ffff:127.0.0.1]:8080", 0, dir).value_or(0), 1234u);
  EXPECT_EQ(LoopbackPeerUid("ipv4:127.0.0.1:9", 0, dir).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(LoopbackPeerUid("ipv4:127.0.0.1:8081", 0, dir).status().code(),
            absl::StatusCode::kNotFound);  // only in TIME_WAIT
  // Two users' sockets with one local end: only the server's port tells
  // them apart, and without it the answer is nobody.
  EXPECT_EQ(LoopbackPeerUid("ipv4:127.0.0.1:8082", 50000, dir).value_or(0), 1234u);
  EXPECT_EQ(LoopbackPeerUid("ipv4:127.0.0.1:8082", 50001, dir).value_or(0), 5678u);
  absl::Status both = LoopbackPeerUid("ipv4:127.0.0.1:8082", 0, dir).status();
  EXPECT_EQ(both.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(both.message(), HasSubstr("sockets of 2 different users"));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace farcall::agent
