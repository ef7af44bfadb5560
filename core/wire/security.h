// Transport security at the gRPC edge: TLS credentials for servers and
// channels from PEM files, and the bearer token a call carries.
//
//   ServerTls tls{{"server.pem", "server.key", "ca.pem"}, /*require_client_cert=*/true};
//   auto files = ServerTlsFiles::Create(tls);           // core/wire/server_tls.h
//   auto channel = ChannelCredentials({"client.pem", "client.key", "ca.pem"});
//   std::string authorization = AuthorizationOf(*server_context);
//   absl::Status s = tokens.Authorize(authorization, handler);   // core/tokens.h
//
// No files: plaintext (insecure) credentials, as before TLS existed. Errors
// name the file and what is wrong; never a file's content.
#ifndef FARCALL_CORE_WIRE_SECURITY_H_
#define FARCALL_CORE_WIRE_SECURITY_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_context.h"

namespace farcall {

// PEM file paths; empty: not given.
struct TlsFiles {
  std::string cert;  // this side's certificate chain
  std::string key;   // its private key
  std::string ca;    // the CA that signs the other side's certificates
  bool any() const { return !cert.empty() || !key.empty() || !ca.empty(); }
};

struct ServerTls {
  TlsFiles files;
  // Refuse clients without a certificate signed by files.ca (mutual TLS).
  bool require_client_cert = false;
};

// The bytes of a PEM file (a certificate, key or CA bundle), read whole:
// NOT_FOUND when it cannot be read, INVALID_ARGUMENT when it is not a
// regular file (a directory, a device) or is larger than kMaxPemBytes (no
// such file is). `flag` names it in the message.
inline constexpr int64_t kMaxPemBytes = int64_t{1} << 20;
absl::StatusOr<std::string> ReadPemFile(const std::string& path, const char* flag);

// Plaintext without files; TLS otherwise, trusting ca (the system's roots
// when empty) and presenting cert and key when both are given.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentials(const TlsFiles& tls);

// The value of the call's `authorization` metadata; empty when absent.
std::string AuthorizationOf(const grpc::ServerContextBase& ctx);
// The call's capability (`farcall-capability-bin`, core/capability.h);
// empty when absent.
std::string CapabilityOf(const grpc::ServerContextBase& ctx);

}  // namespace farcall

#endif  // FARCALL_CORE_WIRE_SECURITY_H_
