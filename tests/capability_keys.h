// A router's signing key and its agents' verify keys for tests, written
// into a directory: DIR/capability-router.pem (the Ed25519 private key, for
// --capability_signing_key_file) and DIR/capability-agents.pem (its public half, for
// --capability_verify_keys_file).
#ifndef FARCALL_TESTS_CAPABILITY_KEYS_H_
#define FARCALL_TESTS_CAPABILITY_KEYS_H_

#include <fstream>
#include <string>

#include "core/capability.h"

namespace farcall::testing {

// Writes a fresh key pair into `dir`; returns the public key's PEM.
inline std::string WriteCapabilityKeys(const std::string& dir,
                                       const std::string& router = "capability-router.pem",
                                       const std::string& agents = "capability-agents.pem") {
  const std::string pem = NewCapabilitySigningKeyPem();
  const std::string pub = CapabilitySigner::FromPem(pem, "test").value().public_key_pem();
  std::ofstream(dir + "/" + router) << pem;
  std::ofstream(dir + "/" + agents) << pub;
  return pub;
}

}  // namespace farcall::testing

#endif  // FARCALL_TESTS_CAPABILITY_KEYS_H_
