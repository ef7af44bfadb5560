#include "core/wire/server_tls.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/security/tls_certificate_provider.h"
#include "grpcpp/security/tls_credentials_options.h"
#include "openssl/bio.h"
#include "openssl/err.h"
#include "openssl/evp.h"
#include "openssl/pem.h"
#include "openssl/ssl.h"
#include "openssl/x509.h"

namespace farcall {
namespace {

// How often gRPC's watcher re-reads the memory files (its least).
constexpr unsigned kWatchSeconds = 1;
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using X509Ptr = std::unique_ptr<X509, X509Free>;
using PkeyPtr = std::unique_ptr<EVP_PKEY, PkeyFree>;

// Every certificate in `pem`, in order.
std::vector<X509Ptr> Certificates(const std::string& pem) {
  std::vector<X509Ptr> certs;
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  if (bio == nullptr) return certs;
  while (X509* x = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr)) certs.emplace_back(x);
  BIO_free(bio);
  ERR_clear_error();  // the end of the file reads as an error
  return certs;
}

PkeyPtr PrivateKey(const std::string& pem) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  if (bio == nullptr) return nullptr;
  PkeyPtr key(PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr));
  BIO_free(bio);
  ERR_clear_error();
  return key;
}

absl::Time NotAfter(X509* cert) {
  std::tm tm{};
  if (ASN1_TIME_to_tm(X509_get0_notAfter(cert), &tm) != 1) return absl::InfinitePast();
  return absl::FromTimeT(timegm(&tm));
}

// The files as read, and a digest of their bytes to tell a change.
struct Raw {
  std::string chain, key, ca;
  std::string digest;
};

absl::StatusOr<Raw> ReadAll(const TlsFiles& f) {
  Raw r;
  absl::StatusOr<std::string> chain = ReadPemFile(f.cert, "--tls_cert");
  if (!chain.ok()) return chain.status();
  r.chain = *std::move(chain);
  absl::StatusOr<std::string> key = ReadPemFile(f.key, "--tls_key");
  if (!key.ok()) return key.status();
  r.key = *std::move(key);
  if (!f.ca.empty()) {
    absl::StatusOr<std::string> ca = ReadPemFile(f.ca, "--tls_ca");
    if (!ca.ok()) return ca.status();
    r.ca = *std::move(ca);
  }
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> sha(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  bool ok = sha != nullptr && EVP_DigestInit_ex(sha.get(), EVP_sha256(), nullptr) == 1;
  for (const std::string* part : {&r.chain, &r.key, &r.ca}) {
    const uint64_t size = part->size();
    ok = ok && EVP_DigestUpdate(sha.get(), &size, sizeof(size)) == 1 &&
         EVP_DigestUpdate(sha.get(), part->data(), part->size()) == 1;
  }
  if (!ok || EVP_DigestFinal_ex(sha.get(), digest, &length) != 1) {
    return absl::InternalError("hashing the TLS files failed.");
  }
  r.digest.assign(reinterpret_cast<const char*>(digest), length);
  return r;
}

// The files, checked: what goes into the memory files, and when the
// certificate expires.
struct Checked {
  std::string identity;  // the key, then the chain
  absl::Time not_after;
};

absl::StatusOr<Checked> Check(const TlsFiles& f, const Raw& raw) {
  std::vector<X509Ptr> certs = Certificates(raw.chain);
  if (certs.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls_cert: ", f.cert, " holds no PEM certificate."));
  }
  PkeyPtr pkey = PrivateKey(raw.key);
  if (pkey == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls_key: ", f.key, " holds no PEM private key."));
  }
  if (X509_check_private_key(certs.front().get(), pkey.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat(
        "--tls_key: ", f.key, " is not the key of the certificate in ", f.cert, " (--tls_cert)."));
  }
  if (!f.ca.empty() && Certificates(raw.ca).empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls_ca: ", f.ca, " holds no PEM certificate."));
  }
  return Checked{absl::StrCat(raw.key, "\n", raw.chain), NotAfter(certs.front().get())};
}

// A memory file holding `bytes`, closed on exec.
absl::StatusOr<int> MemoryFile(const char* name, const std::string& bytes) {
  const int fd = memfd_create(name, MFD_CLOEXEC);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("memfd_create failed: ", std::strerror(errno)));
  }
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      close(fd);
      return absl::InternalError(absl::StrCat("writing a memory file failed: ", strerror(err)));
    }
    done += static_cast<size_t>(n);
  }
  return fd;
}

// Puts `bytes` in place of the memory file `fd` in one step, so a reader
// of /proc/self/fd/`fd` sees the old bytes or the new, never a mix.
absl::Status Replace(int fd, const char* name, const std::string& bytes) {
  absl::StatusOr<int> fresh = MemoryFile(name, bytes);
  if (!fresh.ok()) return fresh.status();
  // gRPC's watcher tells a file that changed while it read it by its
  // modification time, to the second: the new file's is at least a second
  // past the old one's, so that a read across the swap is never taken for
  // a whole one.
  struct stat old_stat {};
  if (fstat(fd, &old_stat) == 0) {
    timespec times[2];
    clock_gettime(CLOCK_REALTIME, &times[0]);
    times[1] = times[0];
    if (times[1].tv_sec <= old_stat.st_mtim.tv_sec) times[1].tv_sec = old_stat.st_mtim.tv_sec + 1;
    futimens(*fresh, times);
  }
  const int r = dup3(*fresh, fd, O_CLOEXEC);
  const int err = errno;
  close(*fresh);
  if (r < 0) return absl::InternalError(absl::StrCat("dup3 failed: ", std::strerror(err)));
  return absl::OkStatus();
}

std::string PathOf(int fd) { return absl::StrCat("/proc/self/fd/", fd); }

}  // namespace

absl::StatusOr<std::shared_ptr<ServerTlsFiles>> ServerTlsFiles::Create(const ServerTls& tls) {
  const TlsFiles& f = tls.files;
  if (f.cert.empty() || f.key.empty()) {
    return absl::InvalidArgumentError("TLS needs both --tls_cert and --tls_key.");
  }
  if (tls.require_client_cert && f.ca.empty()) {
    return absl::InvalidArgumentError(
        "--require_client_cert needs --tls_ca, the CA that signs client certificates.");
  }
  absl::StatusOr<Raw> raw = ReadAll(f);
  if (!raw.ok()) return raw.status();
  absl::StatusOr<Checked> checked = Check(f, *raw);
  if (!checked.ok()) return checked.status();
  std::shared_ptr<ServerTlsFiles> files(new ServerTlsFiles(tls));
  absl::StatusOr<int> identity = MemoryFile("farcall-tls-identity", checked->identity);
  if (!identity.ok()) return identity.status();
  files->identity_fd_ = *identity;
  if (!f.ca.empty()) {
    absl::StatusOr<int> ca = MemoryFile("farcall-tls-ca", raw->ca);
    if (!ca.ok()) return ca.status();
    files->ca_fd_ = *ca;
  }
  files->tried_ = raw->digest;
  files->not_after_ = checked->not_after;
  files->identity_ = checked->identity;

  const std::string identity_path = PathOf(files->identity_fd_);
  auto provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      identity_path, identity_path, f.ca.empty() ? "" : PathOf(files->ca_fd_), kWatchSeconds);
  grpc::experimental::TlsServerCredentialsOptions options(provider);
  options.watch_identity_key_cert_pairs();
  if (!f.ca.empty()) options.watch_root_certs();
  options.set_cert_request_type(tls.require_client_cert
                                    ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                                : f.ca.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                               : GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY);
  files->credentials_ = grpc::experimental::TlsServerCredentials(options);
  if (files->credentials_ == nullptr) {
    return absl::InternalError("gRPC refused the TLS server credentials.");
  }
  return files;
}

ServerTlsFiles::~ServerTlsFiles() {
  // The memory files stay open: gRPC's watcher may outlive this (it holds
  // the paths, /proc/self/fd/N), and a descriptor number reused by a pipe
  // would block its next read. Two small files, once per process.
}

absl::StatusOr<bool> ServerTlsFiles::Reload(bool force) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Raw> raw = ReadAll(tls_.files);
  absl::StatusOr<Checked> checked =
      raw.ok() ? Check(tls_.files, *raw) : absl::StatusOr<Checked>(raw.status());
  // A Secret swapped between the reads of its files gives a mix of the old
  // and the new: while the files do not belong together and their bytes
  // keep changing, read them again.
  for (int again = 0; again < 3 && raw.ok() && !checked.ok(); ++again) {
    absl::StatusOr<Raw> next = ReadAll(tls_.files);
    if (!next.ok() || next->digest == raw->digest) break;
    raw = std::move(next);
    checked = Check(tls_.files, *raw);
  }
  // Files that could not be read count as one state, remembered like bad
  // bytes: the error is reported once, not at every tick.
  const std::string attempt =
      raw.ok() ? raw->digest : absl::StrCat("unreadable: ", raw.status().message());
  if (!force && attempt == tried_) return false;
  tried_ = attempt;
  if (!raw.ok()) return raw.status();
  if (!checked.ok()) return checked.status();
  // The CA first: should the identity's swap fail, nothing of it is in use.
  if (ca_fd_ >= 0) {
    if (absl::Status s = Replace(ca_fd_, "farcall-tls-ca", raw->ca); !s.ok()) return s;
  }
  if (absl::Status s = Replace(identity_fd_, "farcall-tls-identity", checked->identity); !s.ok()) {
    return s;
  }
  not_after_ = checked->not_after;
  identity_ = checked->identity;
  return true;
}

absl::Time ServerTlsFiles::not_after() const {
  absl::MutexLock lock(&mu_);
  return not_after_;
}

absl::StatusOr<std::shared_ptr<ssl_ctx_st>> ServerTlsFiles::HttpContext(
    const std::string& client_ca_pem) {
  std::string identity;
  {
    absl::MutexLock lock(&mu_);
    identity = identity_;
  }
  absl::MutexLock lock(&http_mu_);
  if (http_context_ != nullptr && identity == http_identity_ && client_ca_pem == http_ca_) {
    return http_context_;
  }
  auto refused = [](const char* what) {
    ERR_clear_error();
    return absl::InternalError(absl::StrCat("OpenSSL refused ", what, " for the metrics port."));
  };
  std::shared_ptr<SSL_CTX> ctx(SSL_CTX_new(TLS_server_method()), SSL_CTX_free);
  if (ctx == nullptr) return refused("a TLS context");
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  // A scrape is one request per connection: no session tickets to resume
  // with (nor their writes after the handshake).
  SSL_CTX_set_num_tickets(ctx.get(), 0);
  SSL_CTX_set_session_cache_mode(ctx.get(), SSL_SESS_CACHE_OFF);
  SSL_CTX_set_mode(ctx.get(), SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  // identity_ was checked when it was read: the key, then the chain.
  std::vector<X509Ptr> chain = Certificates(identity);
  PkeyPtr key = PrivateKey(identity);
  if (chain.empty() || key == nullptr || SSL_CTX_use_certificate(ctx.get(), chain[0].get()) != 1 ||
      SSL_CTX_use_PrivateKey(ctx.get(), key.get()) != 1) {
    return refused("the certificate and key");
  }
  for (size_t i = 1; i < chain.size(); ++i) {
    if (SSL_CTX_add1_chain_cert(ctx.get(), chain[i].get()) != 1) return refused("the chain");
  }
  if (!client_ca_pem.empty()) {
    std::vector<X509Ptr> cas = Certificates(client_ca_pem);
    if (cas.empty()) {
      return absl::InvalidArgumentError("--metrics_client_ca holds no PEM certificate.");
    }
    X509_STORE* store = SSL_CTX_get_cert_store(ctx.get());
    for (const X509Ptr& ca : cas) {
      if (X509_STORE_add_cert(store, ca.get()) != 1 ||
          SSL_CTX_add_client_CA(ctx.get(), ca.get()) != 1) {
        return refused("the client CA");
      }
    }
    SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  }
  http_identity_ = std::move(identity);
  http_ca_ = client_ca_pem;
  http_context_ = std::move(ctx);
  return http_context_;
}

}  // namespace farcall
