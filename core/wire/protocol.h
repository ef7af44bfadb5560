// Facts of farcall's wire protocol that more than one side must agree on,
// in one place (the messages themselves are proto/farcall/v1/farcall.proto;
// the contract is docs/architecture.md).
#ifndef FARCALL_CORE_WIRE_PROTOCOL_H_
#define FARCALL_CORE_WIRE_PROTOCOL_H_

#include "absl/status/status.h"

namespace farcall {

// The RPCs' full method names, for the generic (raw-frame) stubs.
inline constexpr char kAgentExecuteMethod[] = "/farcall.v1.Agent/Execute";
inline constexpr char kAgentCallMethod[] = "/farcall.v1.Agent/Call";
inline constexpr char kRouterExecuteMethod[] = "/farcall.v1.Router/Execute";
inline constexpr char kRouterCallMethod[] = "/farcall.v1.Router/Call";

// Metadata on every Execute and Call answer of an agent: its id. The router
// tells "the agent answered" from "never reached it" by it.
inline constexpr char kAgentIdMetadataKey[] = "farcall-agent-id";

// The answer to a call whose first message carries no header, the same
// from agents and routers.
inline absl::Status MissingHeaderError() {
  return absl::InvalidArgumentError("the first request message must carry the call header.");
}

// How an agent's UNAVAILABLE answer begins when a UCX call's inputs never
// arrived over UCX (the handler did not run): a client that chose UCX by
// itself sends the call again over gRPC.
// The bytes of a UCX call's MAC key (UcxTensors.key).
inline constexpr size_t kUcxKeyBytes = 16;
inline constexpr char kUcxInputsFailed[] = "ucx: the call's inputs did not arrive";
// Attribute names farcall keeps for itself (farcall/_tree.py's result tree):
// in-process (Python) handlers' dispatch reads them, native handlers never
// see them.
inline constexpr char kReservedAttributePrefix[] = "_farcall.";

}  // namespace farcall

#endif  // FARCALL_CORE_WIRE_PROTOCOL_H_
