#include "core/wire/security.h"

#include "absl/strings/str_cat.h"
#include "core/capability.h"
#include "core/tokens.h"
#include "core/watched_file.h"

namespace farcall {
namespace {

absl::StatusOr<std::string> ReadPem(const std::string& path, const char* flag) {
  absl::StatusOr<std::string> pem = ReadPemFile(path, flag);
  if (!pem.ok()) return pem.status();
  if (pem->find("-----BEGIN ") == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": ", path, " is not a PEM file."));
  }
  return pem;
}

}  // namespace

absl::StatusOr<std::string> ReadPemFile(const std::string& path, const char* flag) {
  return ReadRegularFile(path, kMaxPemBytes, flag);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentials(const TlsFiles& f) {
  if (!f.any()) return grpc::InsecureChannelCredentials();
  if (f.cert.empty() != f.key.empty()) {
    return absl::InvalidArgumentError(
        "a client certificate needs both its certificate (tls_cert) and key (tls_key).");
  }
  grpc::SslCredentialsOptions opts;
  if (!f.ca.empty()) {
    absl::StatusOr<std::string> ca = ReadPem(f.ca, "tls_ca");
    if (!ca.ok()) return ca.status();
    opts.pem_root_certs = *ca;
  }
  if (!f.cert.empty()) {
    absl::StatusOr<std::string> cert = ReadPem(f.cert, "tls_cert");
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = ReadPem(f.key, "tls_key");
    if (!key.ok()) return key.status();
    opts.pem_cert_chain = *cert;
    opts.pem_private_key = *key;
  }
  return grpc::SslCredentials(opts);
}

namespace {

std::string MetadataOf(const grpc::ServerContextBase& ctx, const char* key) {
  const auto& md = ctx.client_metadata();
  auto it = md.find(key);
  if (it == md.end()) return "";
  return std::string(it->second.data(), it->second.size());
}

}  // namespace

std::string AuthorizationOf(const grpc::ServerContextBase& ctx) {
  return MetadataOf(ctx, kAuthorizationKey);
}

std::string CapabilityOf(const grpc::ServerContextBase& ctx) {
  return MetadataOf(ctx, kCapabilityMetadataKey);
}

}  // namespace farcall
