// libFuzzer: a capability as an agent reads it (core/capability.h). The
// input is verified as sent (it must never verify: that would be a
// signature forgery), and signed with the router's key behind a valid
// version and key id, so that the parser behind the signature sees
// arbitrary structure too. Aborts when a promise is broken.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/capability.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const farcall::CapabilitySigner* signer = new farcall::CapabilitySigner(
      farcall::CapabilitySigner::FromPem(farcall::NewCapabilitySigningKeyPem(), "fuzz").value());
  static const farcall::CapabilityVerifier* verifier = new farcall::CapabilityVerifier(
      farcall::CapabilityVerifier::FromPem(signer->public_key_pem(), "fuzz").value());
  const std::string input(reinterpret_cast<const char*>(data), size);
  const absl::Time now = absl::FromUnixSeconds(1'800'000'000);
  if (verifier->Verify(input, now).ok()) std::abort();  // forged
  const std::string blob = signer->SignForTest(signer->BodyForTest(input));
  absl::StatusOr<farcall::Capability> c = verifier->Verify(blob, now);
  if (c.ok()) {
    // Whatever parsed is within the promised bounds.
    if (c->expires <= now ||
        c->expires - now > farcall::kMaxCapabilityLifetime + farcall::kCapabilityClockSkew) {
      std::abort();
    }
    if (blob.size() > farcall::kMaxCapabilityBytes) std::abort();
    // A second look, from the cache, says the same.
    absl::StatusOr<farcall::Capability> again = verifier->Verify(blob, now);
    if (!again.ok() || again->principal != c->principal || again->handler != c->handler ||
        again->agent_id != c->agent_id || again->expires != c->expires) {
      std::abort();
    }
  }
  return 0;
}
