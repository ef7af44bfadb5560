#include "core/security_flags.h"

#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "core/log.h"
#include "core/metrics.h"

ABSL_FLAG(std::string, tls_cert, "", "serve TLS with this PEM certificate chain");
ABSL_FLAG(std::string, tls_key, "", "the PEM private key of --tls_cert");
ABSL_FLAG(std::string, tls_ca, "", "verify client certificates against this PEM CA");
ABSL_FLAG(bool, require_client_cert, false,
          "refuse clients without a certificate signed by --tls_ca (mutual TLS)");
ABSL_FLAG(std::string, tokens_file, "",
          "require bearer tokens: lines 'TOKEN HANDLER[,HANDLER...]' or 'TOKEN *'");
ABSL_FLAG(std::string, capability_key_file, "",
          "a secret of at least 32 bytes shared by a router and its agents: the router mints "
          "short-lived capabilities with it, so that callers' tokens never reach agents, and "
          "agents verify them");

namespace farcall {

absl::StatusOr<ServerSecurity> ServerSecurityFromFlags() {
  ServerSecurity s;
  ServerTls tls;
  tls.files = {absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key),
               absl::GetFlag(FLAGS_tls_ca)};
  tls.require_client_cert = absl::GetFlag(FLAGS_require_client_cert);
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> creds = ServerCredentials(tls);
  if (!creds.ok()) return creds.status();
  s.credentials = *std::move(creds);
  s.tls = !tls.files.cert.empty();
  const std::string tokens = absl::GetFlag(FLAGS_tokens_file);
  if (!tokens.empty()) {
    absl::StatusOr<TokenTable> t = TokenTable::Load(tokens);
    if (!t.ok()) return t.status();
    s.tokens = *std::move(t);
  }
  const std::string key = absl::GetFlag(FLAGS_capability_key_file);
  if (!key.empty()) {
    absl::StatusOr<CapabilityKey> k = CapabilityKey::Load(key);
    if (!k.ok()) return k.status();
    s.capability_key = *std::move(k);
  }
  return s;
}

namespace {

metrics::Counter ReloadFailures() {
  static auto* family = new metrics::CounterFamily(
      "farcall_config_reload_failures_total",
      "Reloads of a configuration file (SIGHUP, or the file changed) that failed; the process "
      "kept what it had.",
      {"file"});
  return family->With({"tokens"});
}

}  // namespace

void ExportReloadMetrics() { ReloadFailures().Increment(0); }

void ReloadTokens(const TokenTable& tokens, bool force) {
  if (tokens.path().empty()) return;
  absl::StatusOr<bool> r = tokens.Reload(force);
  if (!r.ok()) {
    ReloadFailures().Increment();
    log::Error(absl::StrCat("reloading the tokens failed; the ", tokens.size(),
                            " token(s) loaded before stay in use: ", r.status().message()));
    return;
  }
  if (*r) {
    log::Info(absl::StrCat("tokens reloaded from ", tokens.path(), ": ", tokens.size(), " token(s)",
                           force ? " (SIGHUP)" : " (the file changed)"));
  }
}

}  // namespace farcall
