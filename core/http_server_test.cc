#include "core/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace farcall {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

std::unique_ptr<HttpServer> Serve(HttpServer::Limits limits = {}) {
  auto server = HttpServer::Start(
      "127.0.0.1:0",
      [](absl::string_view path) {
        if (path == "/metrics") return HttpResponse{200, "text/plain", "farcall_up 1\n"};
        return HttpResponse{404, "text/plain", "no page\n"};
      },
      limits);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

// A TCP connection to 127.0.0.1:port from `source` (any 127.x.y.z: each is
// a peer of its own), with 5 s receive and send timeouts.
int Connect(int port, const char* source = "127.0.0.1") {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  sockaddr_in from{};
  from.sin_family = AF_INET;
  inet_pton(AF_INET, source, &from.sin_addr);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof(from)), 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)), 0);
  return fd;
}

// Everything the server sends until it closes ("" when it closed at once,
// or nothing came within 5 s).
std::string ReadAll(int fd) {
  std::string got;
  char buf[4096];
  for (;;) {
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  return got;
}

// Whether the server closed `fd` (end of stream within 5 s, nothing sent).
bool ClosedByServer(int fd) {
  char c;
  return recv(fd, &c, 1, 0) == 0;
}

std::string Ask(int port, const std::string& request, const char* source = "127.0.0.1") {
  const int fd = Connect(port, source);
  EXPECT_EQ(send(fd, request.data(), request.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(request.size()));
  std::string got = ReadAll(fd);
  close(fd);
  return got;
}

std::string Scrape(int port) { return Ask(port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"); }

TEST(HttpServerTest, AnswersGetAndHeadAndRefusesTheRest) {
  auto server = Serve();
  ASSERT_NE(server, nullptr);
  const int port = server->port();
  EXPECT_THAT(Scrape(port), StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(Scrape(port), HasSubstr("\r\n\r\nfarcall_up 1\n"));
  EXPECT_THAT(Ask(port, "GET /metrics?x=1 HTTP/1.0\r\n\r\n"), HasSubstr("farcall_up 1"));
  const std::string head = Ask(port, "HEAD /metrics HTTP/1.1\r\n\r\n");
  EXPECT_THAT(head, HasSubstr("Content-Length: 13\r\n"));
  EXPECT_THAT(head, ::testing::EndsWith("\r\n\r\n"));
  EXPECT_THAT(Ask(port, "GET /nothing HTTP/1.1\r\n\r\n"), StartsWith("HTTP/1.1 404 Not Found"));
  EXPECT_THAT(Ask(port, "POST /metrics HTTP/1.1\r\n\r\n"),
              StartsWith("HTTP/1.1 405 Method Not Allowed"));
  EXPECT_THAT(Ask(port, "garbage\r\n\r\n"), StartsWith("HTTP/1.1 400 Bad Request"));
  EXPECT_THAT(Ask(port, std::string(9000, 'a')),
              StartsWith("HTTP/1.1 431 Request Header Fields Too Large"));
}

// Opens `each` connections that send nothing from every one of `sources`,
// then scrapes 3 times from 127.0.0.1, each of which must be answered.
// Returns the idle connections, oldest first.
std::vector<int> ScrapePastIdleConnections(const HttpServer& server,
                                           const std::vector<std::string>& sources, int each) {
  std::vector<int> idle;
  for (const std::string& source : sources) {
    for (int i = 0; i < each; ++i) idle.push_back(Connect(server.port(), source.c_str()));
  }
  for (int i = 0; i < 3; ++i) EXPECT_THAT(Scrape(server.port()), HasSubstr("farcall_up 1")) << i;
  return idle;
}

// The attack that blinded civetweb's 4 threads: 32 connections that never
// finish a request. Scrapes from another peer are answered while they hang.
TEST(HttpServerTest, ConnectionsThatSendNothingDoNotBlindScrapes) {
  auto server = Serve();
  ASSERT_NE(server, nullptr);
  for (int fd : ScrapePastIdleConnections(*server, {"127.0.0.2"}, 32)) close(fd);
}

// Many peers fill the server: a new connection takes the place of the
// oldest one still sending nothing.
TEST(HttpServerTest, AFullServerMakesRoomByClosingTheOldestIdleConnection) {
  HttpServer::Limits limits;
  limits.max_connections = 16;
  limits.min_age_to_replace = absl::ZeroDuration();
  auto server = Serve(limits);
  ASSERT_NE(server, nullptr);
  std::vector<std::string> peers;
  for (int peer = 2; peer < 10; ++peer) peers.push_back("127.0.0." + std::to_string(peer));
  std::vector<int> idle = ScrapePastIdleConnections(*server, peers, 4);
  // The first connections made were closed to make room.
  EXPECT_TRUE(ClosedByServer(idle[0]));
  for (int fd : idle) close(fd);
}

// One peer's own idle connections cannot keep out its next request, and a
// peer holds at most max_per_peer connections.
TEST(HttpServerTest, APeersOldestIdleConnectionGivesWayToItsNewOne) {
  HttpServer::Limits limits;
  limits.max_per_peer = 4;
  limits.min_age_to_replace = absl::ZeroDuration();
  auto server = Serve(limits);
  ASSERT_NE(server, nullptr);
  std::vector<int> idle;
  for (int i = 0; i < 6; ++i) idle.push_back(Connect(server->port()));
  EXPECT_THAT(Scrape(server->port()), HasSubstr("farcall_up 1"));
  EXPECT_TRUE(ClosedByServer(idle[0]));  // for a newer one
  for (int fd : idle) close(fd);
}

// A request dripped byte by byte ends at the read deadline, whatever it
// has sent.
TEST(HttpServerTest, ARequestMustArriveWithinItsDeadline) {
  HttpServer::Limits limits;
  limits.read_request = absl::Milliseconds(300);
  auto server = Serve(limits);
  ASSERT_NE(server, nullptr);
  const int fd = Connect(server->port());
  const std::string part = "GET /metrics HTTP/1.1\r\n";
  ASSERT_EQ(send(fd, part.data(), part.size(), MSG_NOSIGNAL), static_cast<ssize_t>(part.size()));
  const absl::Time start = absl::Now();
  EXPECT_TRUE(ClosedByServer(fd));
  EXPECT_LT(absl::Now() - start, absl::Seconds(4));
  close(fd);
  EXPECT_THAT(Scrape(server->port()), HasSubstr("farcall_up 1"));
}

TEST(HttpServerTest, ABadAddressIsUnavailable) {
  auto server =
      HttpServer::Start("not-an-address:99999", [](absl::string_view) { return HttpResponse{}; });
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(HttpServer::Start("no-port", [](absl::string_view) { return HttpResponse{}; }).ok());
}

}  // namespace
}  // namespace farcall
