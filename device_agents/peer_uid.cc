#include "device_agents/peer_uid.h"

#include <arpa/inet.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <set>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace farcall::agent {
namespace {

absl::Status NotLoopback(absl::string_view peer) {
  return absl::PermissionDeniedError(
      absl::StrCat("shared memory serves only calls over loopback TCP from this host; this call "
                   "came from ",
                   peer, "."));
}

// How /proc/net/tcp{,6} write an address: each 32-bit word of the address
// as the host reads it from memory, in hex, then ':' and the port in hex.
std::string ProcAddress(const unsigned char* bytes, size_t size, int port) {
  std::string out;
  for (size_t i = 0; i < size; i += 4) {
    uint32_t word;
    std::memcpy(&word, bytes + i, 4);
    char hex[9];
    std::snprintf(hex, sizeof(hex), "%08X", word);
    out += hex;
  }
  char p[6];
  std::snprintf(p, sizeof(p), "%04X", port);
  return absl::StrCat(out, ":", p);
}

// A loopback spelling of the client's end: the family and address bytes
// (network order) of the socket, and its port.
struct Endpoint {
  int family;
  unsigned char addr[16];
  int port;
  size_t size() const { return family == AF_INET ? 4 : 16; }
};

// The uids of the established sockets in /proc/net `table` whose local end
// is `e` and remote port `server_port` (any when 0).
void FindInTable(const std::string& table, const Endpoint& e, int server_port,
                 std::set<uint32_t>& uids) {
  const std::string local = ProcAddress(e.addr, e.size(), e.port);
  std::ifstream in(table);
  std::string line;
  std::getline(in, line);  // the column names
  while (std::getline(in, line)) {
    std::vector<absl::string_view> f =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    uint32_t uid;
    // f[3] is the state: 01, ESTABLISHED. A closed client's TIME_WAIT
    // entry (uid 0) is nobody's.
    if (f.size() <= 7 || f[3] != "01" || !absl::EqualsIgnoreCase(f[1], local) ||
        !absl::SimpleAtoi(f[7], &uid)) {
      continue;
    }
    const size_t colon = f[2].rfind(':');
    int remote_port = -1;
    if (colon == absl::string_view::npos ||
        !absl::SimpleHexAtoi(f[2].substr(colon + 1), &remote_port)) {
      continue;
    }
    if (server_port == 0 || remote_port == server_port) uids.insert(uid);
  }
}

// A sock_diag socket that has sent `request` about `family`'s TCP sockets
// (`flags` beside NLM_F_REQUEST: NLM_F_DUMP for all of them), for the
// answer to be read from; -1 when the kernel cannot be asked (no
// NETLINK_SOCK_DIAG, as in some sandboxes).
int AskSockDiag(int family, inet_diag_req_v2 request, uint16_t flags) {
  const int fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
  if (fd < 0) return -1;
  struct {
    nlmsghdr header;
    inet_diag_req_v2 request;
  } ask{};
  ask.header.nlmsg_len = sizeof(ask);
  ask.header.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  ask.header.nlmsg_flags = static_cast<uint16_t>(NLM_F_REQUEST | flags);
  ask.request = request;
  ask.request.sdiag_family = static_cast<uint8_t>(family);
  ask.request.sdiag_protocol = IPPROTO_TCP;
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (sendto(fd, &ask, sizeof(ask), 0, reinterpret_cast<sockaddr*>(&kernel), sizeof(kernel)) !=
      static_cast<ssize_t>(sizeof(ask))) {
    close(fd);
    return -1;
  }
  return fd;
}

// Asks the kernel for the one TCP socket whose local end is `client` and
// whose remote end is `server`: a lookup in its hash table, unlike a dump,
// which walks all of it (milliseconds on a large host). The uid when that
// socket is established; nullopt when there is none, or the kernel cannot
// be asked.
std::optional<uint32_t> FindExact(const Endpoint& client, const Endpoint& server) {
  inet_diag_req_v2 request{};
  request.idiag_states = ~0u;
  request.id.idiag_sport = htons(static_cast<uint16_t>(client.port));
  request.id.idiag_dport = htons(static_cast<uint16_t>(server.port));
  std::memcpy(request.id.idiag_src, client.addr, client.size());
  std::memcpy(request.id.idiag_dst, server.addr, server.size());
  request.id.idiag_cookie[0] = INET_DIAG_NOCOOKIE;
  request.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
  const int fd = AskSockDiag(client.family, request, 0);
  if (fd < 0) return std::nullopt;
  std::optional<uint32_t> uid;
  alignas(nlmsghdr) char buf[4096];
  ssize_t n;
  do {
    n = recv(fd, buf, sizeof(buf), 0);
  } while (n < 0 && errno == EINTR);
  auto* h = reinterpret_cast<nlmsghdr*>(buf);
  if (n > 0 && NLMSG_OK(h, n) && h->nlmsg_type == SOCK_DIAG_BY_FAMILY) {
    const auto* m = static_cast<const inet_diag_msg*>(NLMSG_DATA(h));
    if (m->idiag_state == TCP_ESTABLISHED) uid = m->idiag_uid;
  }
  close(fd);
  return uid;
}

// The same as FindInTable, asked of the kernel with a sock_diag dump of
// the family's established TCP sockets. False when the kernel cannot be
// asked.
bool FindByNetlink(const Endpoint& e, int server_port, std::set<uint32_t>& uids) {
  inet_diag_req_v2 request{};
  request.idiag_states = 1u << TCP_ESTABLISHED;
  const int fd = AskSockDiag(e.family, request, NLM_F_DUMP);
  if (fd < 0) return false;
  alignas(nlmsghdr) char buf[32768];
  for (;;) {
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    for (auto* h = reinterpret_cast<nlmsghdr*>(buf); NLMSG_OK(h, n); h = NLMSG_NEXT(h, n)) {
      if (h->nlmsg_type == NLMSG_DONE) {
        close(fd);
        return true;
      }
      if (h->nlmsg_type == NLMSG_ERROR) {
        close(fd);
        return false;
      }
      const auto* m = static_cast<const inet_diag_msg*>(NLMSG_DATA(h));
      if (ntohs(m->id.idiag_sport) == e.port &&
          std::memcmp(m->id.idiag_src, e.addr, e.size()) == 0 &&
          (server_port == 0 || ntohs(m->id.idiag_dport) == server_port)) {
        uids.insert(m->idiag_uid);
      }
    }
  }
  close(fd);
  return false;
}

}  // namespace

absl::StatusOr<uint32_t> LoopbackPeerUid(absl::string_view peer, int server_port,
                                         const std::string& proc_net) {
  // gRPC writes "ipv4:A.B.C.D:PORT" and "ipv6:[ADDR]:PORT", the brackets
  // sometimes escaped.
  std::string rest = absl::StrReplaceAll(peer, {{"%5B", "["}, {"%5D", "]"}, {"%3A", ":"}});
  const bool v6 = absl::StartsWith(rest, "ipv6:");
  absl::string_view r = rest;
  if (!absl::ConsumePrefix(&r, "ipv4:") && !absl::ConsumePrefix(&r, "ipv6:")) {
    return NotLoopback(peer);
  }
  const size_t colon = r.rfind(':');
  int port;
  if (colon == absl::string_view::npos || !absl::SimpleAtoi(r.substr(colon + 1), &port) ||
      port <= 0 || port > 65535) {
    return NotLoopback(peer);
  }
  std::string host(r.substr(0, colon));
  if (v6) {
    if (host.size() < 2 || host.front() != '[' || host.back() != ']') return NotLoopback(peer);
    host = host.substr(1, host.size() - 2);
  }
  // Every spelling of a loopback client, as the v4 table or the v6 table
  // would list its socket.
  std::vector<Endpoint> candidates;
  auto add = [&](int family, const unsigned char* bytes) {
    Endpoint e{family, {}, port};
    std::memcpy(e.addr, bytes, e.size());
    candidates.push_back(e);
  };
  unsigned char v4[4];
  unsigned char v6b[16];
  if (!v6 && inet_pton(AF_INET, host.c_str(), v4) == 1) {
    if (v4[0] != 127) return NotLoopback(peer);
    unsigned char mapped[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    std::memcpy(mapped + 12, v4, 4);
    add(AF_INET, v4);
    add(AF_INET6, mapped);
  } else if (v6 && inet_pton(AF_INET6, host.c_str(), v6b) == 1) {
    static const unsigned char kLoopback[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    static const unsigned char kMappedPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    const bool mapped = std::memcmp(v6b, kMappedPrefix, 12) == 0;
    if (std::memcmp(v6b, kLoopback, 16) != 0 && !(mapped && v6b[12] == 127)) {
      return NotLoopback(peer);
    }
    add(AF_INET6, v6b);
    if (mapped) add(AF_INET, v6b + 12);
  } else {
    return NotLoopback(peer);
  }
  // First the kernel's own lookup of the one connection, for the server
  // addresses a loopback client most likely reached (its own address, the
  // family's loopback address); then, if it was another, a walk of every
  // established socket.
  if (server_port > 0 && proc_net.empty()) {
    for (const Endpoint& e : candidates) {
      Endpoint server = e;
      server.port = server_port;
      if (std::optional<uint32_t> uid = FindExact(e, server)) return *uid;
      static const unsigned char kV4[4] = {127, 0, 0, 1};
      static const unsigned char kV6[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
      std::memcpy(server.addr, e.family == AF_INET ? kV4 : kV6, e.size());
      if (std::memcmp(server.addr, e.addr, e.size()) != 0) {
        if (std::optional<uint32_t> uid = FindExact(e, server)) return *uid;
      }
    }
  }
  std::set<uint32_t> uids;
  for (const Endpoint& e : candidates) {
    if (!proc_net.empty() || !FindByNetlink(e, server_port, uids)) {
      FindInTable(absl::StrCat(proc_net.empty() ? "/proc/net" : proc_net, "/",
                               e.family == AF_INET ? "tcp" : "tcp6"),
                  e, server_port, uids);
    }
  }
  if (uids.size() == 1) return *uids.begin();
  if (uids.empty()) {
    return absl::NotFoundError(absl::StrCat("no open socket of this host is ", peer, "."));
  }
  return absl::NotFoundError(absl::StrCat("sockets of ", uids.size(), " different users are ", peer,
                                          "; whose call this is cannot be told."));
}

}  // namespace farcall::agent
