#include "core/security_flags.h"

#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
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
ABSL_FLAG(std::string, capability_signing_key_file, "",
          "router: a PEM Ed25519 private key (openssl genpkey -algorithm ed25519) to sign "
          "short-lived capabilities with, so that callers' tokens never reach agents");
ABSL_FLAG(std::string, capability_verify_keys_file, "",
          "agent: PEM Ed25519 public keys (one or more; openssl pkey -in KEY -pubout) that "
          "capabilities may be signed with");
ABSL_FLAG(bool, metrics_tls, false,
          "serve the metrics port (--metrics_listen) over TLS, with --tls_cert and --tls_key "
          "(reloaded with them)");
ABSL_FLAG(std::string, metrics_client_ca, "",
          "with --metrics_tls: require on the metrics port a client certificate that this PEM CA "
          "signed (read again when it changes)");
ABSL_FLAG(std::string, metrics_tokens_file, "",
          "with --metrics_tls: require on the metrics port a bearer token that this tokens file "
          "lists (as --tokens_file's lines; reloaded when it changes)");
ABSL_FLAG(std::string, capability_key_file, "",
          "replaced: see --capability_signing_key_file (routers) and "
          "--capability_verify_keys_file (agents)");

namespace farcall {
namespace {

// Which keys a capability key file holds, for logs.
std::string KeyIds(const CapabilitySigner& s) { return s.key_id(); }
std::string KeyIds(const CapabilityVerifier& v) { return absl::StrJoin(v.key_ids(), ", "); }

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

// The metrics port's client CA (--metrics_client_ca), read again at most
// once a second while connections come: a rotated CA takes the next ones.
// Bytes that are not PEM certificates, or a file that cannot be read, leave
// the CA read before in use.
class MetricsClientCa {
 public:
  explicit MetricsClientCa(std::string path) : path_(std::move(path)) {}
  absl::Status Load() {
    absl::StatusOr<std::string> pem = ReadPemFile(path_, "--metrics_client_ca");
    if (!pem.ok()) return pem.status();
    absl::MutexLock l(&mu_);
    pem_ = *std::move(pem);
    read_at_ = absl::Now();
    return absl::OkStatus();
  }
  std::string Current() {
    absl::MutexLock l(&mu_);
    if (absl::Now() - read_at_ >= absl::Seconds(1)) {
      read_at_ = absl::Now();
      absl::StatusOr<std::string> pem = ReadPemFile(path_, "--metrics_client_ca");
      if (pem.ok() && absl::StrContains(*pem, "-----BEGIN CERTIFICATE-----"))
        pem_ = *std::move(pem);
    }
    return pem_;
  }

 private:
  const std::string path_;
  absl::Mutex mu_;
  std::string pem_ ABSL_GUARDED_BY(mu_);
  absl::Time read_at_ ABSL_GUARDED_BY(mu_);
};

// --metrics_tls, --metrics_client_ca and --metrics_tokens_file into `s`
// (whose TLS files are read by now).
absl::Status MetricsAccessFromFlags(ServerSecurity& s) {
  const std::string ca_path = absl::GetFlag(FLAGS_metrics_client_ca);
  const std::string tokens_path = absl::GetFlag(FLAGS_metrics_tokens_file);
  if (!absl::GetFlag(FLAGS_metrics_tls)) {
    if (!ca_path.empty() || !tokens_path.empty()) {
      return absl::InvalidArgumentError(
          "--metrics_client_ca and --metrics_tokens_file need --metrics_tls: over plain HTTP a "
          "bearer token can be read by anyone on the way.");
    }
    return absl::OkStatus();
  }
  if (s.tls_files == nullptr) {
    return absl::InvalidArgumentError(
        "--metrics_tls serves the metrics port with this server's certificate: it needs "
        "--tls_cert and --tls_key.");
  }
  std::shared_ptr<MetricsClientCa> ca;
  if (!ca_path.empty()) {
    ca = std::make_shared<MetricsClientCa>(ca_path);
    if (absl::Status loaded = ca->Load(); !loaded.ok()) return loaded;
  }
  // Checked now, so that a CA without certificates stops the process.
  absl::StatusOr<std::shared_ptr<ssl_ctx_st>> first =
      s.tls_files->HttpContext(ca != nullptr ? ca->Current() : "");
  if (!first.ok()) return first.status();
  s.metrics_access.tls = [files = s.tls_files, ca]() -> std::shared_ptr<ssl_ctx_st> {
    absl::StatusOr<std::shared_ptr<ssl_ctx_st>> ctx =
        files->HttpContext(ca != nullptr ? ca->Current() : "");
    return ctx.ok() ? *ctx : nullptr;
  };
  if (!tokens_path.empty()) {
    absl::StatusOr<TokenTable> t = TokenTable::Load(tokens_path);
    if (!t.ok()) {
      return absl::Status(t.status().code(),
                          absl::StrCat("--metrics_tokens_file: ", t.status().message()));
    }
    s.metrics_tokens = *std::move(t);
    s.metrics_access.authorized = [tokens = s.metrics_tokens](absl::string_view authorization) {
      return tokens.Authenticate(authorization).ok();
    };
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ServerSecurity> ServerSecurityFromFlags(ServerRole role) {
  if (!absl::GetFlag(FLAGS_capability_key_file).empty()) {
    return absl::InvalidArgumentError(
        "--capability_key_file (a secret every agent shared, with which any of them could mint "
        "capabilities) is gone: give the router an Ed25519 private key, "
        "--capability_signing_key_file, and the agents its public key, "
        "--capability_verify_keys_file (docs/security.md, 'Flags').");
  }
  const std::string signing = absl::GetFlag(FLAGS_capability_signing_key_file);
  const std::string verify = absl::GetFlag(FLAGS_capability_verify_keys_file);
  if (role == ServerRole::kAgent && !signing.empty()) {
    return absl::InvalidArgumentError(
        "--capability_signing_key_file is the router's: an agent verifies capabilities with "
        "public keys only (--capability_verify_keys_file).");
  }
  if (role == ServerRole::kRouter && !verify.empty()) {
    return absl::InvalidArgumentError(
        "--capability_verify_keys_file is the agents': a router signs capabilities "
        "(--capability_signing_key_file).");
  }
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
    s.require_client_cert = tls.require_client_cert;
    ExportCertificateExpiry(*s.tls_files);
  }
  const std::string tokens = absl::GetFlag(FLAGS_tokens_file);
  if (!tokens.empty()) {
    absl::StatusOr<TokenTable> t = TokenTable::Load(tokens);
    if (!t.ok()) return t.status();
    s.tokens = *std::move(t);
  }
  if (!signing.empty()) {
    absl::StatusOr<CapabilitySigner> k = CapabilitySigner::Load(signing);
    if (!k.ok()) return k.status();
    log::Info(absl::StrCat("signing capabilities with key ", k->key_id(), " (", signing, ")"));
    s.signer = *std::move(k);
  }
  if (!verify.empty()) {
    absl::StatusOr<CapabilityVerifier> k = CapabilityVerifier::Load(verify);
    if (!k.ok()) return k.status();
    log::Info(
        absl::StrCat("trusting capabilities signed with key(s) ", KeyIds(*k), " (", verify, ")"));
    s.verifier = *std::move(k);
  }
  if (absl::Status m = MetricsAccessFromFlags(s); !m.ok()) return m;
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

// `file`: "tokens", or "metrics_tokens".
void ReloadTokens(const TokenTable& tokens, bool force,
                  const std::function<bool(const std::string&)>& serves, const char* file) {
  if (tokens.path().empty()) return;
  absl::StatusOr<bool> r = tokens.Reload(force);
  if (!r.ok()) {
    ReloadFailures(file).Increment();
    log::Error(absl::StrCat("reloading the ", file, " failed; the ", tokens.size(),
                            " token(s) loaded before stay in use: ", r.status().message()));
    return;
  }
  if (*r) {
    log::Info(absl::StrCat("tokens reloaded from ", tokens.path(), ": ", tokens.size(), " token(s)",
                           force ? " (SIGHUP)" : " (the file changed)"));
    WarnOfUnservedHandlers(tokens, serves);
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

// A capability key file, reloaded, logged by its keys' ids.
template <class Keys>
void ReloadCapabilityKeys(const Keys& keys, const char* file, bool force) {
  absl::StatusOr<bool> r = keys.Reload(force);
  if (!r.ok()) {
    ReloadFailures(file).Increment();
    log::Error(absl::StrCat("reloading ", keys.path(), " failed; key(s) ", KeyIds(keys),
                            " stay in use: ", r.status().message()));
    return;
  }
  if (*r) {
    log::Info(absl::StrCat("capability key(s) reloaded from ", keys.path(),
                           force ? " (SIGHUP)" : " (the file changed)", ": now ", KeyIds(keys)));
  }
}

}  // namespace

void WarnOfUnservedHandlers(const TokenTable& tokens,
                            const std::function<bool(const std::string&)>& serves) {
  if (!serves) return;
  for (const std::string& h : tokens.handlers()) {
    if (serves(h)) continue;
    log::Warning(absl::StrCat("the tokens file ", tokens.path(), " names handler '", h,
                              "', which this agent does not serve (a typo, or a handler it "
                              "lacks): no token may call it here."));
  }
}

ReloadableFiles ServerSecurity::reloadable() const {
  return {tokens, tls_files, signer, verifier, nullptr, metrics_tokens};
}

void ExportReloadMetrics() {
  for (const char* file :
       {"tokens", "tls", "capability_signing_key", "capability_verify_keys", "metrics_tokens"}) {
    ReloadFailures(file).Increment(0);
  }
}

void ReloadFiles(const ReloadableFiles& files, bool force) {
  ReloadTokens(files.tokens, force, files.serves, "tokens");
  ReloadTokens(files.metrics_tokens, force, nullptr, "metrics_tokens");
  if (files.tls != nullptr) ReloadTls(*files.tls, force);
  if (files.signer.has_value()) {
    ReloadCapabilityKeys(*files.signer, "capability_signing_key", force);
  }
  if (files.verifier.has_value()) {
    ReloadCapabilityKeys(*files.verifier, "capability_verify_keys", force);
  }
}

}  // namespace farcall
