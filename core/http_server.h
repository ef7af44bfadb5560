// A small HTTP/1.1 server for the metrics port (/metrics and the router's
// status page), built to stay answerable under slow or hostile clients: one
// thread polls every connection, so a client that sends nothing, or drips
// its request, holds no thread; each request must arrive whole within
// Limits::read_request; each peer (by IP) and the server as a whole keep a
// bounded number of connections, and a new connection over either bound
// takes the place of the oldest one still sending its request. Requests are
// GET or HEAD, answered once with `Connection: close`.
//
// Access (optional): TLS, with a context asked for at each new connection
// (so that a certificate reloaded meanwhile serves the next one), whose
// handshake counts within read_request; and a check of each request's
// Authorization header, 401 when it fails.
//
//   auto server = HttpServer::Start("127.0.0.1:0", [](absl::string_view path) {
//     return HttpResponse{200, "text/plain", "hello\n"};
//   });
//   int port = (*server)->port();
//
// Thread safety: the handler runs on the server's thread, one request at a
// time. The destructor stops the thread and closes every connection.
#ifndef FARCALL_CORE_HTTP_SERVER_H_
#define FARCALL_CORE_HTTP_SERVER_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

struct ssl_ctx_st;  // OpenSSL's SSL_CTX

namespace farcall {

struct HttpResponse {
  int code = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

class HttpServer {
 public:
  struct Limits {
    // From accept to the request's blank line.
    absl::Duration read_request = absl::Seconds(2);
    // From the request's end to the last byte of the answer.
    absl::Duration write_response = absl::Seconds(10);
    size_t max_request_bytes = 8192;
    int max_connections = 256;
    int max_per_peer = 8;
    // A connection younger than this is never pushed out for a new one: a
    // flood of connections cannot push out a scraper whose request is on
    // its way.
    absl::Duration min_age_to_replace = absl::Milliseconds(100);
  };
  // Serves `path` (the request's path, without its query) by `handler`.
  using Handler = std::function<HttpResponse(absl::string_view path)>;
  struct Access {
    // Non-null: connections speak TLS, in the context this gives for each
    // new one (null from it: the connection is closed).
    std::function<std::shared_ptr<ssl_ctx_st>()> tls;
    // Non-null: a request is served only if this is true of its
    // Authorization header ("" when it has none); else 401.
    std::function<bool(absl::string_view authorization)> authorized;
  };

  // `listen` is HOST:PORT or [IPV6]:PORT; port 0 picks a free one.
  // UNAVAILABLE saying why when it cannot be bound.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const std::string& listen,
                                                           Handler handler);
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const std::string& listen,
                                                           Handler handler, Limits limits,
                                                           Access access = {});
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const;

 private:
  struct Impl;
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace farcall

#endif  // FARCALL_CORE_HTTP_SERVER_H_
