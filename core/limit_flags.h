// The limit flags that agents and routers share, defined once so that both
// take the same names, defaults and checks:
//   --max_message_bytes   the largest single gRPC message (64 MiB);
//   --max_header_bytes, --max_tensors, --max_rank, --max_attributes,
//   --max_name_bytes, --max_string_bytes   what one call header may declare
//                         (core/wire/header_limits.h).
#ifndef FARCALL_CORE_LIMIT_FLAGS_H_
#define FARCALL_CORE_LIMIT_FLAGS_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "core/wire/grpc_server.h"
#include "core/wire/header_limits.h"

namespace farcall {

// The header limits the flags ask for; INVALID_ARGUMENT for a value that is
// not positive.
absl::StatusOr<HeaderLimits> HeaderLimitsFromFlags();

// --max_message_bytes, checked: gRPC takes an int, and the agent keeps 64
// KiB of each message for framing. INVALID_ARGUMENT outside that range.
absl::StatusOr<int64_t> MaxMessageBytesFromFlags();

// The gRPC server's limits: --max_message_bytes, --max_concurrent_streams,
// --grpc_memory_bytes, --max_connection_age(_grace) and --drain_seconds,
// checked.
absl::StatusOr<GrpcServerLimits> GrpcServerLimitsFromFlags();

}  // namespace farcall

#endif  // FARCALL_CORE_LIMIT_FLAGS_H_
