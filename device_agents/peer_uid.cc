#include "device_agents/peer_uid.h"

#include <arpa/inet.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
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
  return absl::PermissionDeniedError(absl::StrCat(
      "shared memory serves only calls over loopback TCP from this host; this call "
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

// The uid of the socket whose local address is `address` in `table`, if
// the table lists one.
std::optional<uint32_t> FindIn(const std::string& table, const std::string& address) {
  std::ifstream in(table);
  std::string line;
  std::getline(in, line);  // the column names
  while (std::getline(in, line)) {
    std::vector<absl::string_view> f =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    uint32_t uid;
    if (f.size() > 7 && absl::EqualsIgnoreCase(f[1], address) && absl::SimpleAtoi(f[7], &uid)) {
      return uid;
    }
  }
  return std::nullopt;
}

}  // namespace

absl::StatusOr<uint32_t> LoopbackPeerUid(absl::string_view peer, const std::string& proc_net) {
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
  std::vector<std::pair<std::string, std::string>> candidates;  // table, address
  unsigned char v4[4];
  unsigned char v6b[16];
  if (!v6 && inet_pton(AF_INET, host.c_str(), v4) == 1) {
    if (v4[0] != 127) return NotLoopback(peer);
    unsigned char mapped[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    std::memcpy(mapped + 12, v4, 4);
    candidates.emplace_back("tcp", ProcAddress(v4, 4, port));
    candidates.emplace_back("tcp6", ProcAddress(mapped, 16, port));
  } else if (v6 && inet_pton(AF_INET6, host.c_str(), v6b) == 1) {
    static const unsigned char kLoopback[16] = {0, 0, 0, 0, 0, 0, 0, 0,
                                                0, 0, 0, 0, 0, 0, 0, 1};
    static const unsigned char kMappedPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    const bool mapped = std::memcmp(v6b, kMappedPrefix, 12) == 0;
    if (std::memcmp(v6b, kLoopback, 16) != 0 && !(mapped && v6b[12] == 127)) {
      return NotLoopback(peer);
    }
    candidates.emplace_back("tcp6", ProcAddress(v6b, 16, port));
    if (mapped) candidates.emplace_back("tcp", ProcAddress(v6b + 12, 4, port));
  } else {
    return NotLoopback(peer);
  }
  for (const auto& [table, address] : candidates) {
    if (std::optional<uint32_t> uid = FindIn(absl::StrCat(proc_net, "/", table), address)) {
      return *uid;
    }
  }
  return absl::NotFoundError(absl::StrCat("no open socket of this host is ", peer, "."));
}

absl::StatusOr<uint32_t> PeerUidCache::Get(const std::string& peer) {
  const absl::Time now = absl::Now();
  {
    absl::MutexLock l(&mu_);
    auto it = known_.find(peer);
    if (it != known_.end() && now - it->second.second < ttl_) return it->second.first;
  }
  absl::StatusOr<uint32_t> uid = LoopbackPeerUid(peer);
  if (!uid.ok()) return uid;
  absl::MutexLock l(&mu_);
  if (known_.size() >= 4096) {
    for (auto it = known_.begin(); it != known_.end();) {
      it = now - it->second.second >= ttl_ ? known_.erase(it) : std::next(it);
    }
    if (known_.size() >= 4096) known_.clear();
  }
  known_[peer] = {*uid, now};
  return uid;
}

}  // namespace farcall::agent
