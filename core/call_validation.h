// Validation of a call's header, shared by the agent and the router so that
// the same call gets the same code and message from both. The messages are
// the contract's (ARCHITECTURE.md, "Status contract"); the alias and platform
// messages are JAX's own, word for word.
#ifndef FARCALL_CORE_CALL_VALIDATION_H_
#define FARCALL_CORE_CALL_VALIDATION_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/platform.h"
#include "core/tensor_spec.h"

namespace farcall {

// The parts of a CallHeader that validation looks at, free of protobuf.
struct CallDescriptor {
  std::string handler;
  std::vector<std::string> platforms;
  std::vector<TensorSpec> args;
  std::vector<TensorSpec> results;
  std::map<uint32_t, uint32_t> aliases;  // input index -> output index
};

// What a valid header implies.
struct ValidatedCall {
  // kCuda for a call that names "gpu" (any_gpu then says so).
  Platform platform;
  // The call named "gpu": cuda or rocm, whichever serves it (IsGpuAlias).
  bool any_gpu = false;
  std::vector<int64_t> arg_bytes;
  std::vector<int64_t> result_bytes;
  // Bytes the agent holds for the call: args plus non-aliased results.
  int64_t footprint_bytes = 0;
  // For each result, the arg it aliases, or -1.
  std::vector<int64_t> result_alias;
};

// Checks, in this order: the platform list (count, then support), the
// handler name, every spec (dtype, dims, byte size), then the aliases.
// `max_call_bytes` > 0 also refuses calls whose footprint is larger, with
// RESOURCE_EXHAUSTED naming `limit_owner` ("agent" or "router").
absl::StatusOr<ValidatedCall> ValidateCall(const CallDescriptor& call, int64_t max_call_bytes = 0,
                                           absl::string_view limit_owner = "agent");

// The contract's messages for conditions found outside ValidateCall.
// `registered`: the handlers the platform has there, named after the
// contract's sentence (the first few, in order), or none.
absl::Status HandlerNotFoundError(absl::string_view handler, absl::string_view platform,
                                  std::vector<std::string> registered = {});
absl::Status NoLiveAgentError(absl::string_view platform);
// JAX's own words for a platform farcall does not serve, as the caller
// wrote it: INVALID_ARGUMENT "`buffer_callback` not supported on {platform}
// backend."
absl::Status UnsupportedPlatformError(absl::string_view platform);
absl::Status PlatformNotServedError(absl::string_view served, absl::string_view requested);

}  // namespace farcall

#endif  // FARCALL_CORE_CALL_VALIDATION_H_
