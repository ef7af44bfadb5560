// A server's TLS credentials that follow their PEM files, so certificates
// rotate without a restart (cert-manager, or Kubernetes updating a mounted
// Secret in place):
//
//   auto tls = ServerTlsFiles::Create({{"server.pem", "server.key", "ca.pem"}, true});
//   builder.AddListeningPort(address, (*tls)->credentials());
//   ...
//   absl::StatusOr<bool> changed = (*tls)->Reload(/*force=*/false);  // every tick
//
// Reload reads the files again and checks them (the chain and the key parse,
// the key belongs to the first certificate, the CA parses) before anything
// changes: files caught half-written, or a key that does not match, leave
// the credentials there were in use. Accepted files go into memory files
// (memfd) that gRPC's certificate watcher re-reads every second; new
// handshakes use them from then on, and connections already open keep
// theirs. The key and its chain share one memory file, and each new file's
// modification time is a second past the old one's (gRPC tells a file that
// changed under its read by that time, to the second), so gRPC never takes
// a new key with an old certificate.
//
// The same files serve the metrics port over TLS too (HttpContext: an
// OpenSSL context, built again once they changed).
//
// Thread safety: every method may be called from any thread.
#ifndef FARCALL_CORE_WIRE_SERVER_TLS_H_
#define FARCALL_CORE_WIRE_SERVER_TLS_H_

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/wire/security.h"
#include "grpcpp/security/server_credentials.h"

struct ssl_ctx_st;  // OpenSSL's SSL_CTX

namespace farcall {

class ServerTlsFiles {
 public:
  // Errors name the flag and the file, and what is wrong; never a file's
  // content. Needs tls.files.cert and .key; a client certificate is
  // required with require_client_cert (which needs ca), verified when
  // offered with ca alone, and not asked for without ca.
  static absl::StatusOr<std::shared_ptr<ServerTlsFiles>> Create(const ServerTls& tls);
  ~ServerTlsFiles();
  ServerTlsFiles(const ServerTlsFiles&) = delete;
  ServerTlsFiles& operator=(const ServerTlsFiles&) = delete;

  std::shared_ptr<grpc::ServerCredentials> credentials() const { return credentials_; }
  const ServerTls& config() const { return tls_; }

  // Reads the files again. true: their bytes changed (or `force`) and the
  // new ones are in use within about a second; false: nothing changed. An
  // error says what is wrong with the files; what was in use stays, and the
  // same bytes are not tried again until they change or `force`.
  absl::StatusOr<bool> Reload(bool force) ABSL_LOCKS_EXCLUDED(mu_);

  // When the certificate in use (the chain's first) stops being valid.
  absl::Time not_after() const ABSL_LOCKS_EXCLUDED(mu_);

  // A TLS 1.2+ server context with the certificate in use now, for the
  // metrics port (HttpServer::Access::tls). With `client_ca_pem`, clients
  // must show a certificate it signed. The same context comes back until
  // the certificate or the CA changes. INVALID_ARGUMENT when the CA holds no
  // certificate; INTERNAL when OpenSSL refuses the files.
  absl::StatusOr<std::shared_ptr<ssl_ctx_st>> HttpContext(const std::string& client_ca_pem)
      ABSL_LOCKS_EXCLUDED(mu_, http_mu_);

 private:
  explicit ServerTlsFiles(ServerTls tls) : tls_(std::move(tls)) {}

  const ServerTls tls_;
  mutable absl::Mutex mu_;
  int identity_fd_ = -1;  // the key, then the chain (memfd)
  int ca_fd_ = -1;        // the CA, when tls_.files.ca is given (memfd)
  // The digest of the files last tried, good or bad, or why they could not
  // be read.
  std::string tried_ ABSL_GUARDED_BY(mu_);
  absl::Time not_after_ ABSL_GUARDED_BY(mu_);
  std::string identity_ ABSL_GUARDED_BY(mu_);  // what identity_fd_ holds
  std::shared_ptr<grpc::ServerCredentials> credentials_;
  // HttpContext's last context, and what it was built from.
  absl::Mutex http_mu_;
  std::string http_identity_ ABSL_GUARDED_BY(http_mu_);
  std::string http_ca_ ABSL_GUARDED_BY(http_mu_);
  std::shared_ptr<ssl_ctx_st> http_context_ ABSL_GUARDED_BY(http_mu_);
};

}  // namespace farcall

#endif  // FARCALL_CORE_WIRE_SERVER_TLS_H_
