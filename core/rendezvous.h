// Rendezvous (highest random weight) hashing: which agent a call with side
// effects goes to, by its call_id. Routers and clients that call agents
// directly score the same way, and the score is stable across processes and
// restarts, so every router replica and every client sends one call_id to
// one agent while that agent is live. When an agent goes, only its keys move.
#ifndef FARCALL_CORE_RENDEZVOUS_H_
#define FARCALL_CORE_RENDEZVOUS_H_

#include <cstdint>

#include "absl/strings/string_view.h"

namespace farcall {

// The weight of `address` for `key`; the agent with the highest wins.
inline uint64_t RendezvousScore(absl::string_view key, absl::string_view address) {
  uint64_t h = 0xcbf29ce484222325u;  // FNV-1a, then a SplitMix64 finish
  auto mix = [&h](absl::string_view s) {
    for (unsigned char c : s) h = (h ^ c) * 0x100000001b3u;
  };
  mix(key);
  h = (h ^ 0xff) * 0x100000001b3u;  // a separator no UTF-8 text contains
  mix(address);
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9u;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebu;
  return h ^ (h >> 31);
}

}  // namespace farcall

#endif  // FARCALL_CORE_RENDEZVOUS_H_
