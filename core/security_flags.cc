#include "core/security_flags.h"

#include <ctime>
#include <string>

#include "openssl/bio.h"
#include "openssl/pem.h"
#include "openssl/x509.h"

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

// When the first certificate in the PEM file at `path` stops being valid.
absl::StatusOr<absl::Time> CertificateNotAfter(const std::string& path) {
  BIO* bio = BIO_new_file(path.c_str(), "r");
  if (bio == nullptr) return absl::NotFoundError(absl::StrCat("cannot read ", path, "."));
  X509* cert = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  if (cert == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(path, " holds no PEM certificate."));
  }
  std::tm tm{};
  const int ok = ASN1_TIME_to_tm(X509_get0_notAfter(cert), &tm);
  X509_free(cert);
  if (ok != 1) return absl::InvalidArgumentError(absl::StrCat(path, ": unreadable notAfter."));
  return absl::FromTimeT(timegm(&tm));
}

// farcall_tls_certificate_expiry_timestamp_seconds for --tls_cert, and a
// word in the log when it has expired or will within 14 days.
void ExportCertificateExpiry(const std::string& path) {
  absl::StatusOr<absl::Time> not_after = CertificateNotAfter(path);
  if (!not_after.ok()) {
    log::Warning(
        absl::StrCat("--tls_cert: cannot tell when it expires: ", not_after.status().message()));
    return;
  }
  static auto* family = new metrics::GaugeFamily(
      "farcall_tls_certificate_expiry_timestamp_seconds",
      "When the certificate this process serves TLS with (--tls_cert) expires, in seconds "
      "since the epoch.",
      {"certificate"});
  family->With({"tls_cert"}).Set(static_cast<double>(absl::ToUnixSeconds(*not_after)));
  const std::string when =
      absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", *not_after, absl::UTCTimeZone());
  const absl::Duration left = *not_after - absl::Now();
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
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> creds = ServerCredentials(tls);
  if (!creds.ok()) return creds.status();
  s.credentials = *std::move(creds);
  s.tls = !tls.files.cert.empty();
  if (s.tls) ExportCertificateExpiry(tls.files.cert);
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
