#include "core/capability.h"

#include <algorithm>
#include <deque>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/watched_file.h"
#include "openssl/bio.h"
#include "openssl/err.h"
#include "openssl/evp.h"
#include "openssl/pem.h"

namespace farcall {

// The encoding: a version byte; the signing key's id (kKeyIdBytes of its
// public key's SHA-256); principal, handler and agent id, each a 2-byte
// big-endian length and its bytes; the expiry in Unix milliseconds, 8 bytes
// big-endian; then the Ed25519 signature of all that (64 bytes).
namespace {

constexpr uint8_t kVersion = 2;
constexpr size_t kKeyIdBytes = 8;
constexpr size_t kSignatureBytes = 64;
constexpr size_t kMaxFieldBytes = kMaxCapabilityFieldBytes;
constexpr size_t kShortest = 1 + kKeyIdBytes + 3 * 2 + 8 + kSignatureBytes;

struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using Pkey = std::unique_ptr<EVP_PKEY, PkeyFree>;
struct MdCtxFree {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};
struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};

// A key and its id.
struct Key {
  std::shared_ptr<EVP_PKEY> pkey;
  std::string id;  // kKeyIdBytes, raw
};

std::string Hex(absl::string_view raw) { return absl::BytesToHexString(raw); }

absl::Status Invalid(absl::string_view source, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": ", why));
}

// The key's id, or why it is no Ed25519 key.
absl::StatusOr<Key> Ed25519Key(Pkey pkey, absl::string_view source) {
  if (EVP_PKEY_id(pkey.get()) != EVP_PKEY_ED25519) {
    const char* type = EVP_PKEY_get0_type_name(pkey.get());
    return Invalid(source, absl::StrCat("holds a key of type ", type == nullptr ? "?" : type,
                                        "; capabilities are signed with Ed25519 (openssl "
                                        "genpkey -algorithm ed25519)."));
  }
  unsigned char raw[32];
  size_t n = sizeof(raw);
  if (EVP_PKEY_get_raw_public_key(pkey.get(), raw, &n) != 1) {
    return Invalid(source, "its Ed25519 key has no public half.");
  }
  Key k;
  k.id = Sha256Of(absl::string_view(reinterpret_cast<const char*>(raw), n)).substr(0, kKeyIdBytes);
  k.pkey = std::shared_ptr<EVP_PKEY>(pkey.release(), PkeyFree());
  return k;
}

std::unique_ptr<BIO, BioFree> MemoryBio(absl::string_view pem) {
  return std::unique_ptr<BIO, BioFree>(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

absl::StatusOr<Key> ParsePrivate(absl::string_view pem, absl::string_view source) {
  if (!absl::StrContains(pem, "PRIVATE KEY-----")) {
    return Invalid(source, absl::StrContains(pem, "PUBLIC KEY-----")
                               ? "holds a public key only; the router signs with the private "
                                 "key (openssl genpkey -algorithm ed25519), agents verify with "
                                 "its public half."
                               : "holds no PEM private key (openssl genpkey -algorithm ed25519).");
  }
  if (absl::StrContains(pem, "ENCRYPTED PRIVATE KEY-----") ||
      absl::StrContains(pem, "Proc-Type: 4,ENCRYPTED")) {
    return Invalid(source,
                   "holds a private key encrypted with a passphrase, which the router cannot "
                   "ask for: give it the key unencrypted (openssl pkey -in KEY -out PLAIN) in a "
                   "file only the router may read.");
  }
  auto bio = MemoryBio(pem);
  // No passphrase callback may ever prompt (OpenSSL's default reads the
  // terminal): a key that wants one does not parse.
  pem_password_cb* no_passphrase = [](char*, int, int, void*) { return 0; };
  Pkey pkey(PEM_read_bio_PrivateKey(bio.get(), nullptr, no_passphrase, nullptr));
  ERR_clear_error();
  if (pkey == nullptr) return Invalid(source, "its PEM private key does not parse.");
  return Ed25519Key(std::move(pkey), source);
}

absl::StatusOr<std::vector<Key>> ParsePublic(absl::string_view pem, absl::string_view source) {
  if (absl::StrContains(pem, "PRIVATE KEY-----")) {
    return Invalid(source,
                   "holds a private key; an agent must hold public keys only (openssl pkey -in "
                   "KEY -pubout), the private key stays with the router.");
  }
  auto bio = MemoryBio(pem);
  std::vector<Key> keys;
  while (true) {
    Pkey pkey(PEM_read_bio_PUBKEY(bio.get(), nullptr, nullptr, nullptr));
    if (pkey == nullptr) break;
    absl::StatusOr<Key> k = Ed25519Key(std::move(pkey), source);
    if (!k.ok()) return k.status();
    keys.push_back(*std::move(k));
  }
  ERR_clear_error();
  size_t blocks = 0;
  for (size_t at = pem.find("-----BEGIN "); at != pem.npos; at = pem.find("-----BEGIN ", at + 1)) {
    ++blocks;
  }
  if (keys.empty() || keys.size() != blocks) {
    return Invalid(source, keys.empty() ? "holds no PEM public key (openssl pkey -in KEY -pubout)."
                                        : "one of its PEM blocks is not a public key.");
  }
  return keys;
}

void PutField(std::string& out, absl::string_view field) {
  const size_t n = field.size();  // at most kMaxCapabilityFieldBytes (Mint checks)
  out.push_back(static_cast<char>(n >> 8));
  out.push_back(static_cast<char>(n & 0xff));
  out.append(field.data(), n);
}

bool TakeField(absl::string_view& in, std::string* field) {
  if (in.size() < 2) return false;
  const size_t n = (static_cast<uint8_t>(in[0]) << 8) | static_cast<uint8_t>(in[1]);
  if (n > kMaxFieldBytes || in.size() - 2 < n) return false;
  field->assign(in.data() + 2, n);
  in.remove_prefix(2 + n);
  return true;
}

std::string Sign(EVP_PKEY* pkey, absl::string_view body) {
  std::unique_ptr<EVP_MD_CTX, MdCtxFree> ctx(EVP_MD_CTX_new());
  unsigned char sig[kSignatureBytes];
  size_t n = sizeof(sig);
  if (ctx == nullptr || EVP_DigestSignInit(ctx.get(), nullptr, nullptr, nullptr, pkey) != 1 ||
      EVP_DigestSign(ctx.get(), sig, &n, reinterpret_cast<const unsigned char*>(body.data()),
                     body.size()) != 1 ||
      n != kSignatureBytes) {
    ERR_clear_error();
    return "";
  }
  return std::string(body) + std::string(reinterpret_cast<const char*>(sig), n);
}

bool SignatureMatches(EVP_PKEY* pkey, absl::string_view body, absl::string_view sig) {
  std::unique_ptr<EVP_MD_CTX, MdCtxFree> ctx(EVP_MD_CTX_new());
  const bool ok =
      ctx != nullptr && EVP_DigestVerifyInit(ctx.get(), nullptr, nullptr, nullptr, pkey) == 1 &&
      EVP_DigestVerify(ctx.get(), reinterpret_cast<const unsigned char*>(sig.data()), sig.size(),
                       reinterpret_cast<const unsigned char*>(body.data()), body.size()) == 1;
  ERR_clear_error();
  return ok;
}

absl::Status Refused(VerifyNote* note, CapabilityRefusal why, absl::string_view what) {
  if (note != nullptr) note->refusal = why;
  return absl::UnauthenticatedError(absl::StrCat("the call's capability ", what));
}

// A small map that forgets its oldest entry when full: O(1) per insert.
template <class V>
class BoundedMap {
 public:
  const V* Find(const std::string& k) const {
    auto it = map_.find(k);
    return it == map_.end() ? nullptr : &it->second;
  }
  void Put(std::string k, V v) {
    if (map_.size() >= kCapabilityCacheEntries) {
      map_.erase(order_.front());
      order_.pop_front();
    }
    auto [it, inserted] = map_.insert_or_assign(k, std::move(v));
    if (inserted) order_.push_back(std::move(k));
  }
  void Clear() {
    map_.clear();
    order_.clear();
  }

 private:
  absl::flat_hash_map<std::string, V> map_;
  std::deque<std::string> order_;  // insertion order, for eviction
};

}  // namespace

const char* CapabilityRefusalName(CapabilityRefusal r) {
  switch (r) {
    case CapabilityRefusal::kNone:
      return "";
    case CapabilityRefusal::kMalformed:
      return "malformed";
    case CapabilityRefusal::kUnknownKey:
      return "unknown_key";
    case CapabilityRefusal::kBadSignature:
      return "bad_signature";
    case CapabilityRefusal::kExpired:
      return "expired";
    case CapabilityRefusal::kTooLong:
      return "too_long";
  }
  return "";
}

// ---- The signer ----

struct CapabilitySigner::Shared {
  Shared(std::string path, absl::string_view loaded)
      : file(std::move(path), "capability signing key file", loaded) {}
  WatchedFile file;
  mutable absl::Mutex mu;
  Key key ABSL_GUARDED_BY(mu);
  struct Minted {
    std::string blob;
    absl::Time at;
  };
  BoundedMap<Minted> minted ABSL_GUARDED_BY(mu);  // by principal, handler, agent
};

absl::StatusOr<CapabilitySigner> CapabilitySigner::Load(const std::string& path) {
  absl::StatusOr<std::string> pem = ReadConfigFile(path, "capability signing key file");
  if (!pem.ok()) return pem.status();
  return Make(*pem, path, path);
}

absl::StatusOr<CapabilitySigner> CapabilitySigner::FromPem(absl::string_view pem,
                                                           absl::string_view source) {
  return Make(pem, source, "");
}

absl::StatusOr<CapabilitySigner> CapabilitySigner::Make(absl::string_view pem,
                                                        absl::string_view source,
                                                        const std::string& path) {
  absl::StatusOr<Key> key = ParsePrivate(pem, source);
  if (!key.ok()) return key.status();
  auto shared = std::make_shared<Shared>(path, pem);
  absl::MutexLock l(&shared->mu);
  shared->key = *std::move(key);
  return CapabilitySigner(std::move(shared));
}

std::string CapabilitySigner::BodyForTest(absl::string_view fields_and_expiry) const {
  absl::MutexLock l(&shared_->mu);
  return absl::StrCat(std::string(1, static_cast<char>(kVersion)), shared_->key.id,
                      fields_and_expiry);
}

std::string CapabilitySigner::SignForTest(absl::string_view body) const {
  absl::MutexLock l(&shared_->mu);
  return Sign(shared_->key.pkey.get(), body);
}

std::string CapabilitySigner::Mint(const Capability& c) const {
  // A field cut short would authorize its prefix: none is minted instead.
  for (absl::string_view field : {c.principal, c.handler, c.agent_id}) {
    if (field.size() > kMaxFieldBytes) return "";
  }
  Key key;
  {
    absl::MutexLock l(&shared_->mu);
    key = shared_->key;  // signed outside the lock
  }
  std::string body;
  body.push_back(static_cast<char>(kVersion));
  body += key.id;
  PutField(body, c.principal);
  PutField(body, c.handler);
  PutField(body, c.agent_id);
  const absl::Time expires = std::min(c.expires, absl::Now() + kMaxCapabilityLifetime);
  const uint64_t ms = static_cast<uint64_t>(absl::ToUnixMillis(expires));
  for (int shift = 56; shift >= 0; shift -= 8) body.push_back(static_cast<char>(ms >> shift));
  return Sign(key.pkey.get(), body);
}

std::string CapabilitySigner::MintFor(absl::string_view principal, absl::string_view handler,
                                      absl::string_view agent_id) const {
  // Lengths first, so that no two triples share a key.
  const std::string k =
      absl::StrCat(principal.size(), ",", handler.size(), ",", principal, handler, agent_id);
  const absl::Time now = absl::Now();
  {
    absl::MutexLock l(&shared_->mu);
    const Shared::Minted* m = shared_->minted.Find(k);
    if (m != nullptr && now - m->at < kCapabilityReuse) return m->blob;
  }
  std::string blob = Mint({std::string(principal), std::string(handler), std::string(agent_id),
                           now + kMaxCapabilityLifetime});
  if (!blob.empty()) {
    absl::MutexLock l(&shared_->mu);
    // Signed outside the lock: a reload in between cleared the cache, and a
    // capability of the retired key must not go back into it.
    if (absl::string_view(blob).substr(1, kKeyIdBytes) == shared_->key.id) {
      shared_->minted.Put(k, {blob, now});
    }
  }
  return blob;
}

absl::StatusOr<bool> CapabilitySigner::Reload(bool force) const {
  if (shared_->file.path().empty()) {
    return absl::FailedPreconditionError("this signing key was not loaded from a file.");
  }
  return shared_->file.Reload(force, [this](const std::string& pem) -> absl::Status {
    absl::StatusOr<Key> key = ParsePrivate(pem, shared_->file.path());
    if (!key.ok()) return key.status();
    absl::MutexLock l(&shared_->mu);
    shared_->key = *std::move(key);
    shared_->minted.Clear();  // signed with the old key
    return absl::OkStatus();
  });
}

std::string CapabilitySigner::path() const { return shared_->file.path(); }

std::string CapabilitySigner::public_key_pem() const {
  std::shared_ptr<EVP_PKEY> pkey;
  {
    absl::MutexLock l(&shared_->mu);
    pkey = shared_->key.pkey;
  }
  std::unique_ptr<BIO, BioFree> bio(BIO_new(BIO_s_mem()));
  PEM_write_bio_PUBKEY(bio.get(), pkey.get());
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

std::string NewCapabilitySigningKeyPem() {
  EVP_PKEY* raw = EVP_PKEY_Q_keygen(nullptr, nullptr, "ED25519");
  Pkey pkey(raw);
  std::unique_ptr<BIO, BioFree> bio(BIO_new(BIO_s_mem()));
  PEM_write_bio_PrivateKey(bio.get(), pkey.get(), nullptr, nullptr, 0, nullptr, nullptr);
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

std::string CapabilitySigner::key_id() const {
  absl::MutexLock l(&shared_->mu);
  return Hex(shared_->key.id);
}

// ---- The verifier ----

struct CapabilityVerifier::Shared {
  Shared(std::string path, absl::string_view loaded)
      : file(std::move(path), "capability verify keys file", loaded) {}
  WatchedFile file;
  mutable absl::Mutex mu;
  std::vector<Key> keys ABSL_GUARDED_BY(mu);
  BoundedMap<Capability> verified ABSL_GUARDED_BY(mu);  // by the capability's bytes
};

absl::StatusOr<CapabilityVerifier> CapabilityVerifier::Load(const std::string& path) {
  absl::StatusOr<std::string> pem = ReadConfigFile(path, "capability verify keys file");
  if (!pem.ok()) return pem.status();
  return Make(*pem, path, path);
}

absl::StatusOr<CapabilityVerifier> CapabilityVerifier::FromPem(absl::string_view pem,
                                                               absl::string_view source) {
  return Make(pem, source, "");
}

absl::StatusOr<CapabilityVerifier> CapabilityVerifier::Make(absl::string_view pem,
                                                            absl::string_view source,
                                                            const std::string& path) {
  absl::StatusOr<std::vector<Key>> keys = ParsePublic(pem, source);
  if (!keys.ok()) return keys.status();
  auto shared = std::make_shared<Shared>(path, pem);
  absl::MutexLock l(&shared->mu);
  shared->keys = *std::move(keys);
  return CapabilityVerifier(std::move(shared));
}

absl::StatusOr<Capability> CapabilityVerifier::Verify(absl::string_view encoded, absl::Time now,
                                                      VerifyNote* note) const {
  if (encoded.size() > kMaxCapabilityBytes || encoded.size() < kShortest ||
      static_cast<uint8_t>(encoded[0]) != kVersion) {
    return Refused(note, CapabilityRefusal::kMalformed, "is malformed.");
  }
  std::optional<Capability> known;
  std::shared_ptr<EVP_PKEY> pkey;
  const absl::string_view id = encoded.substr(1, kKeyIdBytes);
  {
    absl::MutexLock l(&shared_->mu);
    if (const Capability* c = shared_->verified.Find(std::string(encoded)); c != nullptr) {
      known = *c;
    } else {
      for (const Key& k : shared_->keys) {
        if (k.id == id) pkey = k.pkey;
      }
    }
  }
  Capability c;
  if (known.has_value()) {
    if (note != nullptr) note->cached = true;
    c = *std::move(known);
  } else {
    if (pkey == nullptr) {
      return Refused(note, CapabilityRefusal::kUnknownKey,
                     absl::StrCat("was signed by a key this agent does not trust (key id ", Hex(id),
                                  "); add the router's public key to "
                                  "--capability_verify_keys_file."));
    }
    const absl::string_view body = encoded.substr(0, encoded.size() - kSignatureBytes);
    // The signature first: nothing of an unsigned blob is read.
    if (!SignatureMatches(pkey.get(), body, encoded.substr(body.size()))) {
      return Refused(note, CapabilityRefusal::kBadSignature,
                     "does not match its signature: it was altered or forged.");
    }
    absl::string_view in = body.substr(1 + kKeyIdBytes);
    if (!TakeField(in, &c.principal) || !TakeField(in, &c.handler) || !TakeField(in, &c.agent_id) ||
        in.size() != 8) {
      return Refused(note, CapabilityRefusal::kMalformed, "is malformed.");
    }
    uint64_t ms = 0;
    for (char b : in) ms = (ms << 8) | static_cast<uint8_t>(b);
    c.expires = absl::FromUnixMillis(static_cast<int64_t>(ms));
  }
  if (c.expires <= now) {
    return Refused(
        note, CapabilityRefusal::kExpired,
        absl::StrCat("expired ",
                     absl::FormatDuration(absl::Trunc(now - c.expires, absl::Seconds(1))),
                     " ago; the router mints fresh ones (Resolve)."));
  }
  if (c.expires - now > kMaxCapabilityLifetime + kCapabilityClockSkew) {
    return Refused(
        note, CapabilityRefusal::kTooLong,
        absl::StrCat("claims to last past the ", absl::FormatDuration(kMaxCapabilityLifetime),
                     " a capability may; check the clocks of router and agent."));
  }
  if (!known.has_value()) {
    absl::MutexLock l(&shared_->mu);
    // Unless the keys were reloaded meanwhile: then it is checked again.
    for (const Key& k : shared_->keys) {
      if (k.pkey == pkey) shared_->verified.Put(std::string(encoded), c);
    }
  }
  return c;
}

absl::StatusOr<bool> CapabilityVerifier::Reload(bool force) const {
  if (shared_->file.path().empty()) {
    return absl::FailedPreconditionError("these verify keys were not loaded from a file.");
  }
  return shared_->file.Reload(force, [this](const std::string& pem) -> absl::Status {
    absl::StatusOr<std::vector<Key>> keys = ParsePublic(pem, shared_->file.path());
    if (!keys.ok()) return keys.status();
    absl::MutexLock l(&shared_->mu);
    shared_->keys = *std::move(keys);
    shared_->verified.Clear();  // a key taken out stops working now
    return absl::OkStatus();
  });
}

std::string CapabilityVerifier::path() const { return shared_->file.path(); }

std::vector<std::string> CapabilityVerifier::key_ids() const {
  absl::MutexLock l(&shared_->mu);
  std::vector<std::string> out;
  for (const Key& k : shared_->keys) out.push_back(Hex(k.id));
  return out;
}

// ---- Scope ----

absl::Status CheckCapabilityAgent(const Capability& c, absl::string_view agent_id) {
  if (c.agent_id != agent_id) {
    return absl::PermissionDeniedError(
        "the call's capability was minted for another agent; ask the router again.");
  }
  return absl::OkStatus();
}

absl::Status CheckCapabilityScope(const Capability& c, absl::string_view handler,
                                  absl::string_view agent_id) {
  if (absl::Status s = CheckCapabilityAgent(c, agent_id); !s.ok()) return s;
  if (c.handler != handler) {
    return absl::PermissionDeniedError(
        absl::StrCat("the call's capability does not allow handler '", handler, "'."));
  }
  return absl::OkStatus();
}

}  // namespace farcall
