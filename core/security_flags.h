// The security flags that agents and routers share, defined once:
//   --tls_cert, --tls_key     serve TLS with this certificate and key;
//   --tls_ca                  verify client certificates against this CA;
//   --require_client_cert     refuse clients without one (mutual TLS);
//   --tokens_file             require bearer tokens (core/tokens.h);
//   --capability_signing_key_file   a router's Ed25519 private key, which
//                             mints capabilities (core/capability.h);
//   --capability_verify_keys_file   an agent's trusted public keys, which
//                             verify them;
//   --metrics_tls             serve the metrics port over TLS with
//                             --tls_cert and --tls_key (reloaded with them);
//   --metrics_client_ca       with it, require a client certificate this CA
//                             signed there;
//   --metrics_tokens_file     with it, require a bearer token this tokens
//                             file lists there.
// (--capability_key_file, the shared secret these replaced, stops the
// process, naming them.)
// Each fails closed: a file given but unreadable, empty or weak stops the
// process.
#ifndef FARCALL_CORE_SECURITY_FLAGS_H_
#define FARCALL_CORE_SECURITY_FLAGS_H_

#include <functional>
#include <memory>

#include <optional>

#include "absl/status/statusor.h"
#include "core/capability.h"
#include "core/http_server.h"
#include "core/tokens.h"
#include "core/wire/security.h"
#include "core/wire/server_tls.h"

namespace farcall {

// The files a process re-reads while it serves (see ReloadFiles). Copies
// share what they reload.
struct ReloadableFiles {
  TokenTable tokens;                    // from no file: nothing to reload
  std::shared_ptr<ServerTlsFiles> tls;  // null: plaintext
  std::optional<CapabilitySigner> signer;
  std::optional<CapabilityVerifier> verifier;
  // An agent's: whether it serves a handler, so that a tokens file naming
  // one it does not is warned of, at start and on each reload (null: a
  // router, whose agents' handlers vary).
  std::function<bool(const std::string&)> serves;
  TokenTable metrics_tokens;  // --metrics_tokens_file's
};

// Warns, one line per handler, of the handlers `tokens` names that
// `serves` says no to: a typo, or a handler this agent lacks, which the
// tokens naming it can never call here.
void WarnOfUnservedHandlers(const TokenTable& tokens,
                            const std::function<bool(const std::string&)>& serves);

// Which side of capabilities the process is: a router signs, an agent
// verifies; each refuses the other's flag.
enum class ServerRole { kRouter, kAgent };

struct ServerSecurity {
  std::shared_ptr<grpc::ServerCredentials> credentials;
  bool tls = false;                           // the credentials are TLS (else plaintext)
  std::shared_ptr<ServerTlsFiles> tls_files;  // with tls: what the credentials follow
  TokenTable tokens;
  bool require_client_cert = false;            // callers need a certificate
  std::optional<CapabilitySigner> signer;      // a router's, or none
  std::optional<CapabilityVerifier> verifier;  // an agent's, or none
  // Who may read the metrics port (/metrics, a router's status page): by
  // default anyone who reaches it, over plain HTTP.
  HttpServer::Access metrics_access;
  TokenTable metrics_tokens;  // what metrics_access.authorized checks

  ReloadableFiles reloadable() const;
  // Whether callers must prove who they are: a token or a client
  // certificate.
  bool authenticates_callers() const { return tokens.required() || require_client_cert; }
};

// What the flags ask for; the files' errors name the flag and the path.
absl::StatusOr<ServerSecurity> ServerSecurityFromFlags(ServerRole role);

// Rotation without restarts: re-reads the tokens file, the TLS files and
// the capability key files when they changed (Kubernetes updates a mounted Secret in place), or,
// with `force` (SIGHUP), whatever they hold, and logs that it did (never a token or a key). A
// reload that fails keeps what was in use, logs why once, and counts
// farcall_config_reload_failures_total{file="tokens"|"tls"|
// "capability_signing_key"|"capability_verify_keys"}; the same
// bad bytes are not retried until they change or SIGHUP. A new certificate
// updates farcall_tls_certificate_expiry_timestamp_seconds. Call it from
// WaitForTerminationSignal's tick.
void ReloadFiles(const ReloadableFiles& files, bool force);
// farcall_config_reload_failures_total at 0 for every file from start-up.
void ExportReloadMetrics();

}  // namespace farcall

#endif  // FARCALL_CORE_SECURITY_FLAGS_H_
