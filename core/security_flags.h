// The security flags that agents and routers share, defined once:
//   --tls_cert, --tls_key     serve TLS with this certificate and key;
//   --tls_ca                  verify client certificates against this CA;
//   --require_client_cert     refuse clients without one (mutual TLS);
//   --tokens_file             require bearer tokens (core/tokens.h);
//   --capability_key_file     the key routers mint capabilities with and
//                             agents verify them with (core/capability.h).
// Each fails closed: a file given but unreadable, empty or weak stops the
// process.
#ifndef FARCALL_CORE_SECURITY_FLAGS_H_
#define FARCALL_CORE_SECURITY_FLAGS_H_

#include <memory>

#include <optional>

#include "absl/status/statusor.h"
#include "core/capability.h"
#include "core/tokens.h"
#include "core/wire/security.h"

namespace farcall {

struct ServerSecurity {
  std::shared_ptr<grpc::ServerCredentials> credentials;
  bool tls = false;  // the credentials are TLS (else plaintext)
  TokenTable tokens;
  std::optional<CapabilityKey> capability_key;
};

// What the flags ask for; the files' errors name the flag and the path.
absl::StatusOr<ServerSecurity> ServerSecurityFromFlags();

// Rotation without restarts: reloads `tokens` from their --tokens_file when
// the file changed (Kubernetes updates a mounted Secret in place), or, with
// `force` (SIGHUP), whatever it holds, and logs that it did (never a token).
// A reload that fails keeps the tokens there were, logs why, and counts
// farcall_config_reload_failures_total{file="tokens"}. Does nothing for
// tokens that came from no file. Call it from WaitForTerminationSignal's
// tick.
void ReloadTokens(const TokenTable& tokens, bool force);
// farcall_config_reload_failures_total{file="tokens"} at 0 from start-up.
void ExportReloadMetrics();

}  // namespace farcall

#endif  // FARCALL_CORE_SECURITY_FLAGS_H_
