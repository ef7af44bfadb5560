#include "server/agent_discovery.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace farcall::router {
namespace {
constexpr char kDnsPrefix[] = "dns:///";
}  // namespace

bool IsMultiAgentSource(const std::string& source) { return absl::StartsWith(source, kDnsPrefix); }

absl::Status CheckAgentSource(const std::string& source) {
  auto bad = [&source](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("--agents entry '", source, "' ", why,
                                                   "; give HOST:PORT or dns:///NAME:PORT."));
  };
  std::string hostport = source;
  if (IsMultiAgentSource(source)) {
    hostport = source.substr(sizeof(kDnsPrefix) - 1);
  } else if (absl::StrContains(source, "://") || absl::StartsWith(source, "dns:")) {
    return bad(absl::StartsWith(source, "dns:") ? "is a dns: name without three slashes"
                                                : "has a scheme other than dns:///");
  }
  const size_t colon = hostport.rfind(':');
  if (colon == std::string::npos || colon == 0) return bad("has no host and port");
  const std::string host = hostport.substr(0, colon);
  if (host.front() == '[' ? host.back() != ']' : absl::StrContains(host, ':')) {
    return bad("has an IPv6 address outside brackets, or no port");
  }
  int port = 0;
  if (!absl::SimpleAtoi(hostport.substr(colon + 1), &port) || port < 1 || port > 65535) {
    return bad("has no port of 1 to 65535");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> ExpandAgentSource(const std::string& source) {
  if (!IsMultiAgentSource(source)) return std::vector<std::string>{source};
  const std::string hostport = source.substr(sizeof(kDnsPrefix) - 1);
  const size_t colon = hostport.rfind(':');
  if (colon == std::string::npos || colon + 1 == hostport.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("agent source '", source, "' has no port (dns:///NAME:PORT)."));
  }
  const std::string host = hostport.substr(0, colon);
  const std::string port = hostport.substr(colon + 1);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_ADDRCONFIG;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve agent source '", source, "': ", gai_strerror(rc)));
  }
  std::vector<std::string> out;
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    char ip[INET6_ADDRSTRLEN] = {};
    if (a->ai_family == AF_INET) {
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr, ip, sizeof(ip));
      out.push_back(absl::StrCat(ip, ":", port));
    } else if (a->ai_family == AF_INET6) {
      inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(a->ai_addr)->sin6_addr, ip, sizeof(ip));
      out.push_back(absl::StrCat("[", ip, "]:", port));
    }
  }
  freeaddrinfo(res);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace farcall::router
