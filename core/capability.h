// Capabilities: short-lived, signed permissions that a router mints and
// agents verify, so that a client's long-lived token never reaches an agent,
// and an agent holds nothing that lets it speak for anyone.
//
//   1. The router holds an Ed25519 private key (--capability_signing_key_file,
//      PEM); agents hold only public keys (--capability_verify_keys_file, one
//      or more PEM keys, so that a new key can be trusted before the old one
//      goes).
//   2. For a caller it has authorized, the router mints one capability per
//      agent: the caller's principal (core/tokens.h), the handler, the
//      agent's id and an expiry at most kMaxCapabilityLifetime ahead, signed.
//      Router.Resolve returns them; a forwarded call carries one too.
//   3. The client sends it to that agent, in the `farcall-capability-bin`
//      metadata, instead of its own token.
//   4. The agent verifies the signature with the key the capability names,
//      the expiry, its own id and the call's handler, and takes the caller's
//      principal from it (for the exactly-once ledger, its logs and metrics).
//
//   absl::StatusOr<CapabilitySigner> s = CapabilitySigner::Load("router.pem");
//   std::string blob = s->MintFor("token:0a1b2c3d4e5f", "axpy", "cpu-1");
//   absl::StatusOr<CapabilityVerifier> v = CapabilityVerifier::Load("trusted.pem");
//   absl::StatusOr<Capability> c = v->Verify(blob, absl::Now());
//
// Make a key pair with
//   openssl genpkey -algorithm ed25519 -out router.pem
//   openssl pkey -in router.pem -pubout -out router.pub.pem
//
// An Ed25519 signature costs tens of microseconds to make or check: the
// signer reuses a capability it minted for the same caller, handler and
// agent while it has most of its life left, and the verifier keeps what it
// verified, keyed by the capability's bytes, until it expires (both bounded).
//
// Both key files are reloaded without a restart (Reload: SIGHUP, or the file
// changed): a reload that fails keeps the keys in use. A verifier's reload
// forgets what it had verified, so that a key taken out stops working at
// once. A capability is a bearer credential for its lifetime: send it over
// TLS. Messages never contain a key or a signature. Thread-safe.
#ifndef FARCALL_CORE_CAPABILITY_H_
#define FARCALL_CORE_CAPABILITY_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace farcall {

// The metadata key calls carry a capability in (binary: gRPC encodes it).
inline constexpr char kCapabilityMetadataKey[] = "farcall-capability-bin";
inline constexpr absl::Duration kMaxCapabilityLifetime = absl::Minutes(5);
// How long a signer hands out one capability again: after this it mints a
// fresh one, so every capability handed out has at least
// kMaxCapabilityLifetime - kCapabilityReuse left.
inline constexpr absl::Duration kCapabilityReuse = absl::Minutes(1);
// How far ahead of the verifier's clock a minter's may run.
inline constexpr absl::Duration kCapabilityClockSkew = absl::Seconds(30);
// The longest encoded capability a verifier reads.
inline constexpr size_t kMaxCapabilityBytes = 4096;
// The longest principal, handler name or agent id a capability names.
inline constexpr size_t kMaxCapabilityFieldBytes = 1024;
// How many capabilities a signer and a verifier each remember.
inline constexpr size_t kCapabilityCacheEntries = 4096;

struct Capability {
  std::string principal;  // who calls; "" when the router authenticates no one
  std::string handler;    // the one handler it may call
  std::string agent_id;   // the one agent it may call (AgentInfo.agent_id)
  absl::Time expires;
};

// Why a verifier refused a capability, for metrics (never decided from the
// message's text).
enum class CapabilityRefusal {
  kNone,
  kMalformed,     // does not parse, or is too long
  kUnknownKey,    // signed by a key this verifier does not trust
  kBadSignature,  // the signature does not match
  kExpired,
  kTooLong,  // claims a lifetime past kMaxCapabilityLifetime (plus skew)
};
// "malformed", "unknown_key", "bad_signature", "expired", "too_long" ("" for
// kNone).
const char* CapabilityRefusalName(CapabilityRefusal r);

// The router's side: an Ed25519 private key that mints capabilities.
class CapabilitySigner {
 public:
  // The key in the PEM file `path`. Fails closed: NOT_FOUND when it cannot
  // be read; INVALID_ARGUMENT when it holds no private key, a public key
  // only (agents' half), or a key that is not Ed25519.
  static absl::StatusOr<CapabilitySigner> Load(const std::string& path);
  static absl::StatusOr<CapabilitySigner> FromPem(absl::string_view pem, absl::string_view source);

  // The encoded, signed capability. Its expiry is clamped to
  // kMaxCapabilityLifetime from now. Empty (none) when a field is longer
  // than kMaxCapabilityFieldBytes: cut short, it would grant its prefix.
  std::string Mint(const Capability& c) const;
  // A capability for `principal` to call `handler` on `agent_id` for
  // kMaxCapabilityLifetime: the one minted for them last, while it is
  // younger than kCapabilityReuse and the key has not changed.
  std::string MintFor(absl::string_view principal, absl::string_view handler,
                      absl::string_view agent_id) const;

  // Reads the file again when its bytes changed (or `force`), and signs with
  // its key from then on. True when the key was replaced; the file's error
  // (the old key stays) when it could not be.
  absl::StatusOr<bool> Reload(bool force) const;
  std::string path() const;
  // The key's id: 16 hex digits of its public key's SHA-256, which every
  // capability names; logged, so that an operator can match keys.
  std::string key_id() const;
  // The public half of the key, as PEM: what agents trust.
  std::string public_key_pem() const;

  // `body` (everything before the signature: version, key id, fields,
  // expiry) followed by its signature, whatever it holds: for fuzzing the
  // parser behind the signature.
  std::string SignForTest(absl::string_view body) const;
  // The body of a capability with these raw fields, for SignForTest.
  std::string BodyForTest(absl::string_view fields_and_expiry) const;

  struct Shared;

 private:
  explicit CapabilitySigner(std::shared_ptr<Shared> s) : shared_(std::move(s)) {}
  // From PEM text; `path` is the file Reload reads again ("" for none).
  static absl::StatusOr<CapabilitySigner> Make(absl::string_view pem, absl::string_view source,
                                               const std::string& path);
  std::shared_ptr<Shared> shared_;
};

// What Verify says besides its answer.
struct VerifyNote {
  bool cached = false;  // answered from what was verified before
  CapabilityRefusal refusal = CapabilityRefusal::kNone;
};

// The agent's side: the public keys it trusts capabilities from.
class CapabilityVerifier {
 public:
  // The keys in the PEM file `path` (one or more). Fails closed: NOT_FOUND
  // when it cannot be read; INVALID_ARGUMENT when it holds no public key, a
  // private key (which an agent must never hold), or a key that is not
  // Ed25519.
  static absl::StatusOr<CapabilityVerifier> Load(const std::string& path);
  static absl::StatusOr<CapabilityVerifier> FromPem(absl::string_view pem,
                                                    absl::string_view source);

  // The capability `encoded` grants: UNAUTHENTICATED, saying why, when it
  // does not parse, names a key this verifier does not trust, its signature
  // is wrong, it has expired, or it claims a lifetime past
  // kMaxCapabilityLifetime (plus skew).
  absl::StatusOr<Capability> Verify(absl::string_view encoded, absl::Time now,
                                    VerifyNote* note = nullptr) const;

  // As CapabilitySigner::Reload; a reload forgets every verified capability.
  absl::StatusOr<bool> Reload(bool force) const;
  std::string path() const;
  // The trusted keys' ids (see CapabilitySigner::key_id).
  std::vector<std::string> key_ids() const;

  struct Shared;

 private:
  explicit CapabilityVerifier(std::shared_ptr<Shared> s) : shared_(std::move(s)) {}
  static absl::StatusOr<CapabilityVerifier> Make(absl::string_view pem, absl::string_view source,
                                                 const std::string& path);
  std::shared_ptr<Shared> shared_;
};

// A fresh Ed25519 private key, as PEM (for tests and tools; operators use
// `openssl genpkey -algorithm ed25519`).
std::string NewCapabilitySigningKeyPem();

// What a call's capability must also say: OK when `c` is for `handler` on
// `agent_id`, PERMISSION_DENIED naming what differs otherwise.
absl::Status CheckCapabilityScope(const Capability& c, absl::string_view handler,
                                  absl::string_view agent_id);
// The agent part alone (Describe, which names no handler).
absl::Status CheckCapabilityAgent(const Capability& c, absl::string_view agent_id);

}  // namespace farcall

#endif  // FARCALL_CORE_CAPABILITY_H_
