#include "core/capability.h"

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "openssl/crypto.h"
#include "openssl/evp.h"
#include "openssl/hmac.h"

namespace farcall {
namespace {

// The encoding: a version byte; principal, handler and agent id, each a
// 2-byte big-endian length and its bytes; the expiry in Unix milliseconds,
// 8 bytes big-endian; then the HMAC-SHA256 of all that, its first 16 bytes
// (a 128-bit tag, as AES-GCM's: it travels on every call).
constexpr uint8_t kVersion = 1;
constexpr size_t kMacBytes = 16;
constexpr size_t kMaxFieldBytes = kMaxCapabilityFieldBytes;

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

absl::Status Refused(absl::string_view why) {
  return absl::UnauthenticatedError(absl::StrCat("the call's capability ", why));
}

}  // namespace

absl::StatusOr<CapabilityKey> CapabilityKey::Load(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    return absl::NotFoundError(absl::StrCat("cannot read the capability key file ", path, "."));
  }
  std::stringstream ss;
  ss << f.rdbuf();
  return FromSecret(ss.str(), path);
}

absl::StatusOr<CapabilityKey> CapabilityKey::FromSecret(std::string secret,
                                                        absl::string_view source) {
  secret = std::string(absl::StripAsciiWhitespace(secret));
  if (secret.size() < kMinCapabilityKeyBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the capability key file ", source, " holds ", secret.size(),
        " bytes; a key needs at least ", kMinCapabilityKeyBytes, " (e.g. openssl rand -hex 32)."));
  }
  return CapabilityKey(std::move(secret));
}

std::string CapabilityKey::Mac(absl::string_view signed_part) const {
  unsigned char full[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  HMAC(EVP_sha256(), secret_.data(), static_cast<int>(secret_.size()),
       reinterpret_cast<const unsigned char*>(signed_part.data()), signed_part.size(), full, &n);
  return std::string(reinterpret_cast<const char*>(full), kMacBytes);
}

std::string CapabilityKey::Mint(const Capability& c) const {
  // A field cut short would authorize its prefix: none is minted instead.
  for (absl::string_view field : {c.principal, c.handler, c.agent_id}) {
    if (field.size() > kMaxFieldBytes) return "";
  }
  std::string out;
  out.push_back(static_cast<char>(kVersion));
  PutField(out, c.principal);
  PutField(out, c.handler);
  PutField(out, c.agent_id);
  const absl::Time expires = std::min(c.expires, absl::Now() + kMaxCapabilityLifetime);
  const uint64_t ms = static_cast<uint64_t>(absl::ToUnixMillis(expires));
  for (int shift = 56; shift >= 0; shift -= 8) out.push_back(static_cast<char>(ms >> shift));
  out += Mac(out);
  return out;
}

absl::StatusOr<Capability> CapabilityKey::Verify(absl::string_view encoded, absl::Time now) const {
  if (encoded.size() > kMaxCapabilityBytes || encoded.size() < 1 + 6 + 8 + kMacBytes ||
      static_cast<uint8_t>(encoded[0]) != kVersion) {
    return Refused("is malformed.");
  }
  const absl::string_view signed_part = encoded.substr(0, encoded.size() - kMacBytes);
  // The MAC first, in constant time: nothing of an unsigned blob is read.
  const std::string mac = Mac(signed_part);
  if (CRYPTO_memcmp(mac.data(), encoded.data() + signed_part.size(), kMacBytes) != 0) {
    return Refused("was not signed with this agent's key (--capability_key_file).");
  }
  Capability c;
  absl::string_view in = signed_part.substr(1);
  if (!TakeField(in, &c.principal) || !TakeField(in, &c.handler) || !TakeField(in, &c.agent_id) ||
      in.size() != 8) {
    return Refused("is malformed.");
  }
  uint64_t ms = 0;
  for (char b : in) ms = (ms << 8) | static_cast<uint8_t>(b);
  c.expires = absl::FromUnixMillis(static_cast<int64_t>(ms));
  if (c.expires <= now) {
    return Refused(absl::StrCat(
        "expired ", absl::FormatDuration(absl::Trunc(now - c.expires, absl::Seconds(1))),
        " ago; the router mints fresh ones (Resolve)."));
  }
  if (c.expires - now > kMaxCapabilityLifetime + kCapabilityClockSkew) {
    return Refused(absl::StrCat("claims to last past the ",
                                absl::FormatDuration(kMaxCapabilityLifetime),
                                " a capability may; check the clocks of router and agent."));
  }
  return c;
}

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
