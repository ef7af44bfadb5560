// Resident arrays' handles: what an agent gives a client for an array it
// keeps (device_agents/resident_store.h), and what routers and clients read
// from one to send a call to the agent that holds it.
//
// A handle is "res-SECRET-BOOT@AGENT":
//   SECRET  128 random bits in hex: unguessable, so that holding the handle
//           is what lets its owner (a principal) name the array;
//   BOOT    64 random bits in hex that the agent drew when it started: a
//           handle from an earlier run of the same agent is known as lost;
//   AGENT   the agent's id (AgentInfo.agent_id), which routers map to its
//           address.
// Messages and logs never print a whole handle, only ShortHandle's prefix.
//
//   absl::StatusOr<ResidentHandle> h = ParseResidentHandle(text, "resident_args[0]");
//   if (h.ok() && h->agent_id != my_id) ...
#ifndef FARCALL_CORE_RESIDENT_HANDLE_H_
#define FARCALL_CORE_RESIDENT_HANDLE_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace farcall {

// The most bytes a handle may have (an agent id is at most 256 of them).
inline constexpr size_t kMaxResidentHandleBytes = 320;

struct ResidentHandle {
  std::string secret;    // 32 hex digits
  std::string boot;      // 16 hex digits
  std::string agent_id;  // not empty
};

// A fresh handle for an array on `agent_id` in its run `boot` (16 hex
// digits, ResidentBoot()).
std::string NewResidentHandle(absl::string_view boot, absl::string_view agent_id);
// 64 fresh random bits in hex: a run's BOOT.
std::string NewResidentBoot();

// INVALID_ARGUMENT naming `where` when `text` is not a handle.
absl::StatusOr<ResidentHandle> ParseResidentHandle(absl::string_view text, absl::string_view where);

// "res-0123abcd…@AGENT": enough to tell handles apart in a message, never
// enough to use one.
std::string ShortHandle(absl::string_view text);

// The one agent that holds every resident of a call, from the handles it
// names (each with where the call names it: "args[2]", "release_residents[0]");
// "" when it names none. INVALID_ARGUMENT for a malformed handle, or for
// handles of two agents, naming both.
absl::StatusOr<std::string> ResidentHolder(
    const std::vector<std::pair<std::string, std::string>>& named);

// NOT_FOUND, marked ErrorReason::kResidentLost: the agent `agent_id` that
// held `handle` is gone (`why`: it restarted, or no live agent has its id).
absl::Status ResidentLostError(absl::string_view handle, absl::string_view why);

}  // namespace farcall

#endif  // FARCALL_CORE_RESIDENT_HANDLE_H_
