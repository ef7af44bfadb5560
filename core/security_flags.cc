#include "core/security_flags.h"

#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
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
namespace {

// farcall_tls_certificate_expiry_timestamp_seconds for --tls_cert, and a
// word in the log when it has expired or will within 14 days.
void ExportCertificateExpiry(const ServerTlsFiles& files) {
  const std::string& path = files.config().files.cert;
  const absl::Time not_after = files.not_after();
  if (not_after == absl::InfinitePast()) {
    log::Warning(absl::StrCat("--tls_cert: cannot tell when ", path, " expires."));
    return;
  }
  static auto* family = new metrics::GaugeFamily(
      "farcall_tls_certificate_expiry_timestamp_seconds",
      "When the certificate this process serves TLS with (--tls_cert) expires, in seconds "
      "since the epoch.",
      {"certificate"});
  family->With({"tls_cert"}).Set(static_cast<double>(absl::ToUnixSeconds(not_after)));
  const std::string when =
      absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", not_after, absl::UTCTimeZone());
  const absl::Duration left = not_after - absl::Now();
  if (left <= absl::ZeroDuration()) {
    log::Error(absl::StrCat("the certificate in --tls_cert (", path, ") expired on ", when,
                            ": TLS clients will refuse this server until it is renewed."));
  } else if (left < absl::Hours(24 * 14)) {
    log::Warning(absl::StrCat("the certificate in --tls_cert (", path, ") expires on ", when,
                              ", in less than 14 days: renew it."));
  }
}

}  // namespace

absl::StatusOr<ServerSecurity> ServerSecurityFromFlags() {
  ServerSecurity s;
  ServerTls tls;
  tls.files = {absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key),
               absl::GetFlag(FLAGS_tls_ca)};
  tls.require_client_cert = absl::GetFlag(FLAGS_require_client_cert);
  if (!tls.files.any()) {
    if (tls.require_client_cert) {
      return absl::InvalidArgumentError(
          "--require_client_cert needs TLS: --tls_cert, --tls_key and --tls_ca.");
    }
    s.credentials = grpc::InsecureServerCredentials();
  } else {
    absl::StatusOr<std::shared_ptr<ServerTlsFiles>> files = ServerTlsFiles::Create(tls);
    if (!files.ok()) return files.status();
    s.tls_files = *std::move(files);
    s.credentials = s.tls_files->credentials();
    s.tls = true;
    ExportCertificateExpiry(*s.tls_files);
  }
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

metrics::Counter ReloadFailures(const char* file) {
  static auto* family = new metrics::CounterFamily(
      "farcall_config_reload_failures_total",
      "Reloads of a configuration file (SIGHUP, or the file changed) that failed; the process "
      "kept what it had.",
      {"file"});
  return family->With({file});
}

void ReloadTokens(const TokenTable& tokens, bool force) {
  if (tokens.path().empty()) return;
  absl::StatusOr<bool> r = tokens.Reload(force);
  if (!r.ok()) {
    ReloadFailures("tokens").Increment();
    log::Error(absl::StrCat("reloading the tokens failed; the ", tokens.size(),
                            " token(s) loaded before stay in use: ", r.status().message()));
    return;
  }
  if (*r) {
    log::Info(absl::StrCat("tokens reloaded from ", tokens.path(), ": ", tokens.size(), " token(s)",
                           force ? " (SIGHUP)" : " (the file changed)"));
  }
}

void ReloadTls(ServerTlsFiles& files, bool force) {
  absl::StatusOr<bool> r = files.Reload(force);
  if (!r.ok()) {
    ReloadFailures("tls").Increment();
    log::Error(
        absl::StrCat("reloading the TLS files failed; the certificate loaded before stays "
                     "in use: ",
                     r.status().message()));
    return;
  }
  if (*r) {
    log::Info(absl::StrCat("TLS files reloaded (", files.config().files.cert,
                           force ? ", SIGHUP" : ", the files changed",
                           "): new connections use them within a second"));
    ExportCertificateExpiry(files);
  }
}

}  // namespace

ReloadableFiles ServerSecurity::reloadable() const { return {tokens, tls_files}; }

void ExportReloadMetrics() {
  ReloadFailures("tokens").Increment(0);
  ReloadFailures("tls").Increment(0);
}

void ReloadFiles(const ReloadableFiles& files, bool force) {
  ReloadTokens(files.tokens, force);
  if (files.tls != nullptr) ReloadTls(*files.tls, force);
}

}  // namespace farcall
