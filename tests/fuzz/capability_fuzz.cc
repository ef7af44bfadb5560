// libFuzzer: a capability as an agent reads it (core/capability.h). The
// input is verified as sent (it must never verify: that would be a MAC
// forgery), and signed with the agent's key, so that the parser behind the
// MAC sees arbitrary structure too. Aborts when a promise is broken.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/capability.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const farcall::CapabilityKey* key = new farcall::CapabilityKey(
      farcall::CapabilityKey::FromSecret(std::string(32, 'k'), "fuzz").value());
  const std::string input(reinterpret_cast<const char*>(data), size);
  const absl::Time now = absl::FromUnixSeconds(1'800'000'000);
  if (key->Verify(input, now).ok()) std::abort();  // forged
  absl::StatusOr<farcall::Capability> c = key->Verify(key->SignForTest(input), now);
  if (c.ok()) {
    // Whatever parsed is within the promised bounds, and mints back the same.
    if (c->expires <= now ||
        c->expires - now > farcall::kMaxCapabilityLifetime + farcall::kCapabilityClockSkew) {
      std::abort();
    }
    if (input.size() + 16 > farcall::kMaxCapabilityBytes) std::abort();
  }
  return 0;
}
