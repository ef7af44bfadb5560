// Raw TCP loopback baselines for bench/run.sh: the ceiling under any RPC.
//
//   tcp_echo server [--ready_fd=N] [--host=IP]  (--host: clients too; bench/hosts.sh)
//   tcp_echo oneway --port=P --bytes=N    client sends, server discards
//   tcp_echo echo   --port=P --bytes=N    server sends everything back
//   tcp_echo memcpy --bytes=N              one memcpy between warm buffers
//
// Client modes end with one JSON line: {"bytes": N, "seconds": S, "gbps": G}.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/time/clock.h"
#include "core/process.h"

ABSL_FLAG(int, ready_fd, -1, "server: write the port here once listening");
ABSL_FLAG(int, port, 0, "client: server port on --host");
ABSL_FLAG(std::string, host, "127.0.0.1",
          "server: IPv4 address to listen on; client: the server's (bench/hosts.sh: another "
          "namespace's)");
ABSL_FLAG(int64_t, bytes, int64_t{256} << 20, "client: payload bytes");

namespace {

constexpr size_t kBuf = 1 << 20;

bool WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w <= 0) return false;
    p += w;
    n -= w;
  }
  return true;
}

// Reads exactly n bytes, or fewer at EOF; returns how many.
size_t ReadFull(int fd, char* p, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, p + got, n - got);
    if (r <= 0) break;
    got += r;
  }
  return got;
}

void Handle(int fd) {
  char mode = 0;
  int64_t total = 0;
  if (ReadFull(fd, &mode, 1) != 1 || ReadFull(fd, reinterpret_cast<char*>(&total), 8) != 8) {
    close(fd);
    return;
  }
  std::vector<char> buf(kBuf);
  int64_t left = total;
  while (left > 0) {
    ssize_t r = read(fd, buf.data(), std::min<int64_t>(kBuf, left));
    if (r <= 0) break;
    if (mode == 'e' && !WriteAll(fd, buf.data(), r)) break;
    left -= r;
  }
  char ack = 'k';
  if (mode == 'o') (void)WriteAll(fd, &ack, 1);
  close(fd);
}

int Serve() {
  farcall::BlockTerminationSignals();
  int s = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  if (inet_pton(AF_INET, absl::GetFlag(FLAGS_host).c_str(), &a.sin_addr) != 1) {
    std::fprintf(stderr, "tcp_echo: --host is not an IPv4 address\n");
    return 2;
  }
  if (bind(s, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || listen(s, 16) != 0) {
    std::perror("tcp_echo: bind");
    return 1;
  }
  socklen_t len = sizeof(a);
  getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
  std::thread([s] {
    for (;;) {
      int c = accept(s, nullptr, nullptr);
      if (c < 0) return;
      std::thread(Handle, c).detach();
    }
  }).detach();
  farcall::ReportReady(absl::GetFlag(FLAGS_ready_fd), ntohs(a.sin_port));
  farcall::WaitForTerminationSignal();
  return 0;
}

int Client(char mode) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(absl::GetFlag(FLAGS_port));
  if (inet_pton(AF_INET, absl::GetFlag(FLAGS_host).c_str(), &a.sin_addr) != 1) {
    std::fprintf(stderr, "tcp_echo: --host is not an IPv4 address\n");
    return 2;
  }
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    std::perror("tcp_echo: connect");
    return 1;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  const int64_t total = absl::GetFlag(FLAGS_bytes);
  std::vector<char> src(kBuf, 'x'), dst(kBuf);
  absl::Time t = absl::Now();
  char hdr[9];
  hdr[0] = mode;
  std::memcpy(hdr + 1, &total, 8);
  WriteAll(fd, hdr, 9);
  int64_t received = 0;
  std::thread reader([&] {
    if (mode == 'o') {
      received = ReadFull(fd, dst.data(), 1) == 1 ? total : 0;
      return;
    }
    while (received < total) {
      ssize_t r = read(fd, dst.data(), kBuf);
      if (r <= 0) break;
      received += r;
    }
  });
  for (int64_t sent = 0; sent < total;) {
    size_t n = std::min<int64_t>(kBuf, total - sent);
    if (!WriteAll(fd, src.data(), n)) break;
    sent += n;
  }
  reader.join();
  double sec = absl::ToDoubleSeconds(absl::Now() - t);
  close(fd);
  if (received != total) {
    std::fprintf(stderr, "tcp_echo: short transfer\n");
    return 1;
  }
  std::printf("{\"bytes\": %lld, \"seconds\": %.6f, \"gbps\": %.6f}\n",
              static_cast<long long>(total), sec, total / sec / 1e9);
  return 0;
}

int Memcpy() {
  const int64_t total = absl::GetFlag(FLAGS_bytes);
  std::vector<char> a(total, 'x'), b(total, 'y');  // both touched: warm
  // The median of three, like every other figure in bench/run.sh.
  std::vector<double> gbps;
  for (int i = 0; i < 3; ++i) {
    absl::Time t = absl::Now();
    std::memcpy(b.data(), a.data(), total);
    double sec = absl::ToDoubleSeconds(absl::Now() - t);
    gbps.push_back(total / sec / 1e9);
    std::swap(a, b);
  }
  std::sort(gbps.begin(), gbps.end());
  std::printf("{\"bytes\": %lld, \"gbps\": %.6f}\n", static_cast<long long>(total), gbps[1]);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<char*> pos = absl::ParseCommandLine(argc, argv);
  const std::string mode = pos.size() > 1 ? pos[1] : "";
  if (mode == "server") return Serve();
  if (mode == "oneway") return Client('o');
  if (mode == "echo") return Client('e');
  if (mode == "memcpy") return Memcpy();
  std::fprintf(stderr, "usage: tcp_echo server|oneway|echo|memcpy [flags]\n");
  return 2;
}
