#include "core/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <list>
#include <map>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "openssl/err.h"
#include "openssl/ssl.h"

namespace farcall {
namespace {

struct SslFree {
  void operator()(SSL* s) const { SSL_free(s); }
};

struct Connection {
  int fd = -1;
  std::string peer;  // the client's IP
  absl::Time accepted;
  absl::Time deadline;
  std::string in;
  std::string out;
  size_t sent = 0;
  bool answering = false;
  std::unique_ptr<SSL, SslFree> ssl;  // null: plain HTTP
  // What TLS waits for before it can go on (POLLIN or POLLOUT), when that
  // is not what the connection's phase would wait for; 0: nothing else.
  short tls_wants = 0;
};

// What `c` waits for in poll.
short PollEvents(const Connection& c) {
  if (c.tls_wants != 0) return c.tls_wants;
  return c.answering ? POLLOUT : POLLIN;
}

// After an SSL_read or SSL_write that returned `n` <= 0: true (keep the
// connection) when TLS only waits for the socket, noting which way.
bool TlsWaits(Connection& c, int n) {
  switch (SSL_get_error(c.ssl.get(), n)) {
    case SSL_ERROR_WANT_READ:
      c.tls_wants = POLLIN;
      return true;
    case SSL_ERROR_WANT_WRITE:
      c.tls_wants = POLLOUT;
      return true;
    default:  // a failed handshake, a close, a broken record
      ERR_clear_error();
      return false;
  }
}

// The value of the request's `name` header (lower case), "" when absent.
std::string HeaderValue(absl::string_view request, absl::string_view name) {
  for (absl::string_view line : absl::StrSplit(request, "\r\n")) {
    const size_t colon = line.find(':');
    if (colon == absl::string_view::npos || !absl::EqualsIgnoreCase(line.substr(0, colon), name)) {
      continue;
    }
    return std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
  }
  return "";
}

const char* Reason(int code) {
  switch (code) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 431:
      return "Request Header Fields Too Large";
    default:
      return "Error";
  }
}

std::string Render(const HttpResponse& r, bool head_only) {
  std::string text = absl::StrCat(
      "HTTP/1.1 ", r.code, " ", Reason(r.code), "\r\nContent-Type: ", r.content_type,
      "\r\nContent-Length: ", r.body.size(), "\r\nCache-Control: no-store\r\nConnection: close\r\n",
      r.code == 401 ? "WWW-Authenticate: Bearer realm=\"farcall\"\r\n" : "", "\r\n");
  if (!head_only) text += r.body;
  return text;
}

std::string PeerOf(const sockaddr_storage& a) {
  char text[INET6_ADDRSTRLEN] = {0};
  if (a.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(a).sin_addr, text, sizeof(text));
  } else if (a.ss_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(a).sin6_addr, text, sizeof(text));
  }
  return text;
}

// "HOST:PORT" or "[HOST]:PORT" into its two parts.
bool SplitHostPort(const std::string& listen, std::string* host, std::string* port) {
  if (!listen.empty() && listen.front() == '[') {
    const size_t close = listen.find("]:");
    if (close == std::string::npos) return false;
    *host = listen.substr(1, close - 1);
    *port = listen.substr(close + 2);
  } else {
    const size_t colon = listen.rfind(':');
    if (colon == std::string::npos) return false;
    *host = listen.substr(0, colon);
    *port = listen.substr(colon + 1);
  }
  return !host->empty() && !port->empty();
}

}  // namespace

struct HttpServer::Impl {
  Handler handler;
  Limits limits;
  Access access;
  int listen_fd = -1;
  int wake_fd = -1;
  int port = 0;
  std::thread thread;
  std::list<Connection> connections;

  ~Impl() {
    if (thread.joinable()) {
      const uint64_t one = 1;
      (void)!write(wake_fd, &one, sizeof(one));
      thread.join();
    }
    for (Connection& c : connections) close(c.fd);
    if (listen_fd >= 0) close(listen_fd);
    if (wake_fd >= 0) close(wake_fd);
  }

  void Close(std::list<Connection>::iterator it) {
    it->ssl.reset();
    close(it->fd);
    connections.erase(it);
  }

  // Makes room for one more connection from `peer`: false when the only
  // ones that could go are too young (the new one is refused instead).
  bool MakeRoom(const std::string& peer, absl::Time now) {
    int from_peer = 0;
    for (const Connection& c : connections) from_peer += c.peer == peer ? 1 : 0;
    const bool peer_full = from_peer >= limits.max_per_peer;
    const bool server_full = static_cast<int>(connections.size()) >= limits.max_connections;
    if (!peer_full && !server_full) return true;
    // The oldest connection still sending its request (of this peer, when
    // the peer is what is full) goes; failing that, the oldest one being
    // answered (a client that does not read its answer).
    for (bool answering : {false, true}) {
      auto oldest = connections.end();
      for (auto it = connections.begin(); it != connections.end(); ++it) {
        if (it->answering != answering || (peer_full && it->peer != peer)) continue;
        if (now - it->accepted < limits.min_age_to_replace) continue;
        if (oldest == connections.end() || it->accepted < oldest->accepted) oldest = it;
      }
      if (oldest != connections.end()) {
        Close(oldest);
        return true;
      }
    }
    return false;
  }

  void Accept(absl::Time now) {
    for (;;) {
      sockaddr_storage addr{};
      socklen_t len = sizeof(addr);
      const int fd = accept4(listen_fd, reinterpret_cast<sockaddr*>(&addr), &len,
                             SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;  // EAGAIN, or a connection that went away
      Connection c;
      c.fd = fd;
      c.peer = PeerOf(addr);
      if (!MakeRoom(c.peer, now)) {
        close(fd);
        continue;
      }
      if (access.tls != nullptr) {
        std::shared_ptr<ssl_ctx_st> ctx = access.tls();
        if (ctx != nullptr) c.ssl.reset(SSL_new(ctx.get()));
        if (c.ssl == nullptr || SSL_set_fd(c.ssl.get(), fd) != 1) {
          ERR_clear_error();
          close(fd);
          continue;
        }
        SSL_set_accept_state(c.ssl.get());  // the handshake comes with the first read
      }
      c.accepted = now;
      c.deadline = now + limits.read_request;  // the handshake's time counts too
      connections.push_back(std::move(c));
    }
  }

  // Reads what `c` sent; once its request is whole, its answer is ready.
  // False when the connection is to be closed.
  bool Read(Connection& c, absl::Time now) {
    char buf[4096];
    if (c.ssl != nullptr) {
      // TLS holds decrypted bytes poll cannot see: read until it waits (or
      // the request is too long to be one).
      c.tls_wants = 0;
      for (;;) {
        const int n = SSL_read(c.ssl.get(), buf, sizeof(buf));
        if (n <= 0) {
          if (!TlsWaits(c, n)) return false;
          break;
        }
        c.in.append(buf, static_cast<size_t>(n));
        if (c.in.size() > limits.max_request_bytes) break;
      }
      if (c.tls_wants == POLLIN) c.tls_wants = 0;  // what a request's read waits for anyway
    } else {
      const ssize_t n = recv(c.fd, buf, sizeof(buf), 0);
      if (n == 0) return false;
      if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
      c.in.append(buf, static_cast<size_t>(n));
    }
    const size_t end = c.in.find("\r\n\r\n");
    if (end == std::string::npos) {
      if (c.in.size() > limits.max_request_bytes) Answer(c, now, {431, "text/plain", ""}, false);
      return true;
    }
    const std::string line = c.in.substr(0, c.in.find("\r\n"));
    std::vector<std::string> parts = absl::StrSplit(line, ' ');
    if (parts.size() != 3 || !absl::StartsWith(parts[2], "HTTP/1.")) {
      Answer(c, now, {400, "text/plain; charset=utf-8", "bad request\n"}, false);
    } else if (parts[0] != "GET" && parts[0] != "HEAD") {
      Answer(c, now, {405, "text/plain; charset=utf-8", "GET or HEAD only\n"}, false);
    } else if (access.authorized != nullptr &&
               !access.authorized(HeaderValue(c.in.substr(0, end), "authorization"))) {
      Answer(c, now, {401, "text/plain; charset=utf-8", "a known bearer token is required\n"},
             false);
    } else {
      const std::string path = parts[1].substr(0, parts[1].find('?'));
      Answer(c, now, handler(path), parts[0] == "HEAD");
    }
    return true;
  }

  void Answer(Connection& c, absl::Time now, const HttpResponse& r, bool head_only) {
    c.out = Render(r, head_only);
    c.answering = true;
    c.deadline = now + limits.write_response;
    if (c.ssl == nullptr) shutdown(c.fd, SHUT_RD);  // TLS may still need to read while it writes
  }

  // Sends what is left of `c`'s answer; false once it is all sent (or the
  // peer is gone).
  bool Write(Connection& c) {
    if (c.ssl != nullptr) {
      c.tls_wants = 0;
      while (c.sent < c.out.size()) {
        const int n = SSL_write(c.ssl.get(), c.out.data() + c.sent,
                                static_cast<int>(std::min<size_t>(c.out.size() - c.sent, 1 << 20)));
        if (n <= 0) return TlsWaits(c, n);
        c.sent += static_cast<size_t>(n);
      }
      SSL_shutdown(c.ssl.get());  // close_notify, best effort: the socket closes next
      ERR_clear_error();
      return false;
    }
    const ssize_t n = send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    c.sent += static_cast<size_t>(n);
    return c.sent < c.out.size();
  }

  void Loop() {
    std::vector<pollfd> fds;
    std::vector<std::list<Connection>::iterator> by_index;
    for (;;) {
      absl::Time now = absl::Now();
      absl::Time next = now + absl::Seconds(1);
      fds.clear();
      by_index.clear();
      fds.push_back({wake_fd, POLLIN, 0});
      fds.push_back({listen_fd, POLLIN, 0});
      for (auto it = connections.begin(); it != connections.end(); ++it) {
        fds.push_back({it->fd, PollEvents(*it), 0});
        by_index.push_back(it);
        next = std::min(next, it->deadline);
      }
      const int wait_ms =
          static_cast<int>(std::max<int64_t>(0, absl::ToInt64Milliseconds(next - now) + 1));
      if (poll(fds.data(), fds.size(), wait_ms) < 0 && errno != EINTR) return;
      if (fds[0].revents != 0) return;  // stopping
      now = absl::Now();
      // Requests already here first: a flood of new connections below must
      // not push out one whose request has arrived.
      for (size_t i = 2; i < fds.size(); ++i) {
        auto it = by_index[i - 2];
        const short ev = fds[i].revents;
        if (ev == 0) continue;
        bool keep;
        if (it->answering) {
          keep = (ev & (POLLERR | POLLHUP)) == 0 && Write(*it);
        } else {
          keep = Read(*it, now);
          if (keep && it->answering) keep = Write(*it);  // most answers go at once
        }
        if (!keep) Close(it);
      }
      for (auto it = connections.begin(); it != connections.end();) {
        auto next_it = std::next(it);
        if (it->deadline <= now) Close(it);
        it = next_it;
      }
      if (fds[1].revents != 0) Accept(now);
    }
  }
};

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HttpServer::~HttpServer() = default;
int HttpServer::port() const { return impl_->port; }

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const std::string& listen,
                                                              Handler handler) {
  return Start(listen, std::move(handler), Limits());
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const std::string& listen,
                                                              Handler handler, Limits limits,
                                                              Access access) {
  auto fail = [&](const std::string& why) { return absl::UnavailableError(why); };
  std::string host, port;
  if (!SplitHostPort(listen, &host, &port)) return fail("not HOST:PORT");
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    return fail(gai_strerror(rc));
  }
  auto impl = std::make_unique<Impl>();
  impl->handler = std::move(handler);
  impl->limits = limits;
  impl->access = std::move(access);
  // OpenSSL writes with write(2), not send(MSG_NOSIGNAL): a scraper that
  // hangs up mid-handshake must not kill the process with SIGPIPE.
  if (impl->access.tls != nullptr) signal(SIGPIPE, SIG_IGN);
  std::string why = "no address";
  for (addrinfo* a = found; a != nullptr && impl->listen_fd < 0; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    const int on = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 128) == 0) {
      impl->listen_fd = fd;
    } else {
      why = std::strerror(errno);
      close(fd);
    }
  }
  freeaddrinfo(found);
  if (impl->listen_fd < 0) return fail(why);
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  getsockname(impl->listen_fd, reinterpret_cast<sockaddr*>(&bound), &len);
  impl->port = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6&>(bound).sin6_port
                                                 : reinterpret_cast<sockaddr_in&>(bound).sin_port);
  impl->wake_fd = eventfd(0, EFD_CLOEXEC);
  if (impl->wake_fd < 0) return fail(std::strerror(errno));
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] { raw->Loop(); });
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

}  // namespace farcall
