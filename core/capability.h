// Capabilities: short-lived, signed permissions that a router mints and
// agents verify, so that a client's long-lived token never reaches an agent.
//
//   1. The router and its agents share a secret key (--capability_key_file,
//      at least kMinCapabilityKeyBytes).
//   2. For a caller it has authorized, the router mints one capability per
//      agent: HMAC-SHA256 over the caller's principal (core/tokens.h), the
//      handler, the agent's id and an expiry at most kMaxCapabilityLifetime
//      ahead (its first 128 bits travel). Router.Resolve returns them; a proxied call carries one
//      too.
//   3. The client sends it to that agent, in the `farcall-capability-bin`
//      metadata, instead of its own token.
//   4. The agent verifies the MAC (in constant time), the expiry, its own id
//      and the call's handler, and takes the caller's principal from it (for
//      the exactly-once ledger, its logs and metrics).
//
//   absl::StatusOr<CapabilityKey> key = CapabilityKey::Load(path);
//   std::string blob = key->Mint({"token:0a1b2c3d4e5f", "axpy", "cpu-1", absl::Now() + ...});
//   absl::StatusOr<Capability> c = key->Verify(blob, absl::Now());
//
// A capability is a bearer credential for its lifetime: send it over TLS.
// Messages never contain the key or a capability's MAC. Thread-safe after
// construction.
#ifndef FARCALL_CORE_CAPABILITY_H_
#define FARCALL_CORE_CAPABILITY_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace farcall {

// The metadata key calls carry a capability in (binary: gRPC encodes it).
inline constexpr char kCapabilityMetadataKey[] = "farcall-capability-bin";
inline constexpr absl::Duration kMaxCapabilityLifetime = absl::Minutes(5);
// How far ahead of the verifier's clock a minter's may run.
inline constexpr absl::Duration kCapabilityClockSkew = absl::Seconds(30);
inline constexpr size_t kMinCapabilityKeyBytes = 32;
// The longest encoded capability a verifier reads.
inline constexpr size_t kMaxCapabilityBytes = 2048;
// The longest principal, handler name or agent id a capability names.
inline constexpr size_t kMaxCapabilityFieldBytes = 1024;

struct Capability {
  std::string principal;  // who calls; "" when the router needs no token
  std::string handler;    // the one handler it may call
  std::string agent_id;   // the one agent it may call (AgentInfo.agent_id)
  absl::Time expires;
};

class CapabilityKey {
 public:
  // The key in `path`: the file's bytes, less surrounding whitespace.
  // Fails closed: NOT_FOUND when it cannot be read, INVALID_ARGUMENT when
  // it is shorter than kMinCapabilityKeyBytes (an empty Secret, say).
  static absl::StatusOr<CapabilityKey> Load(const std::string& path);
  static absl::StatusOr<CapabilityKey> FromSecret(std::string secret, absl::string_view source);

  // The encoded, signed capability. Its expiry is clamped to
  // kMaxCapabilityLifetime from now. Empty (none) when a field is longer
  // than kMaxCapabilityFieldBytes: cut short, it would grant its prefix.
  std::string Mint(const Capability& c) const;
  // The capability `encoded` grants: UNAUTHENTICATED, saying why, when it
  // does not parse, its MAC is wrong, it has expired, or it claims a
  // lifetime past kMaxCapabilityLifetime (plus skew).
  absl::StatusOr<Capability> Verify(absl::string_view encoded, absl::Time now) const;
  // `signed_part` followed by its MAC, whatever it holds: for fuzzing the
  // parser behind the MAC.
  std::string SignForTest(absl::string_view signed_part) const {
    return std::string(signed_part) + Mac(signed_part);
  }

 private:
  explicit CapabilityKey(std::string secret) : secret_(std::move(secret)) {}
  std::string Mac(absl::string_view signed_part) const;

  std::string secret_;
};

// What a call's capability must also say: OK when `c` is for `handler` on
// `agent_id`, PERMISSION_DENIED naming what differs otherwise.
absl::Status CheckCapabilityScope(const Capability& c, absl::string_view handler,
                                  absl::string_view agent_id);
// The agent part alone (Describe, which names no handler).
absl::Status CheckCapabilityAgent(const Capability& c, absl::string_view agent_id);

}  // namespace farcall

#endif  // FARCALL_CORE_CAPABILITY_H_
