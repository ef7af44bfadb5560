#include "core/limit_flags.h"

#include <limits>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

ABSL_FLAG(int64_t, max_message_bytes, 64 << 20,
          "largest single gRPC message, in bytes (bounds a unary Call)");
ABSL_FLAG(int64_t, max_concurrent_streams, 1024, "most calls in flight on one connection");
ABSL_FLAG(int64_t, grpc_memory_bytes, 0,
          "bytes gRPC may hold in buffers for all connections (0: gRPC's default)");
ABSL_FLAG(absl::Duration, max_connection_age, absl::Minutes(30),
          "a client connection older than this is asked to reconnect (GOAWAY), which "
          "spreads clients over replicas and bounds what one connection holds (0: never)");
ABSL_FLAG(absl::Duration, max_connection_age_grace, absl::Hours(1),
          "how long calls in flight on an aged connection may still run before it is "
          "closed (0: no limit)");
ABSL_FLAG(double, drain_seconds, 30,
          "on SIGTERM: report NOT_SERVING at once, take no new calls, and let calls in "
          "flight finish for up to this long before ending them");
ABSL_FLAG(int64_t, max_header_bytes, 1 << 20, "largest encoded call header, in bytes");
ABSL_FLAG(int64_t, max_tensors, 1024, "most tensors (args plus results) one call may declare");
ABSL_FLAG(int64_t, max_rank, 64, "most dims one tensor may have");
ABSL_FLAG(int64_t, max_attributes, 256, "most attributes one call may carry");
ABSL_FLAG(int64_t, max_name_bytes, 1024, "longest handler, platform or attribute name, in bytes");
ABSL_FLAG(int64_t, max_string_bytes, 1 << 20, "longest string attribute, in bytes");
ABSL_FLAG(int64_t, max_call_id_bytes, 128, "longest call_id (idempotency key), in bytes");

namespace farcall {

absl::StatusOr<HeaderLimits> HeaderLimitsFromFlags() {
  HeaderLimits l;
  l.max_header_bytes = absl::GetFlag(FLAGS_max_header_bytes);
  l.max_tensors = absl::GetFlag(FLAGS_max_tensors);
  l.max_rank = absl::GetFlag(FLAGS_max_rank);
  l.max_attributes = absl::GetFlag(FLAGS_max_attributes);
  l.max_name_bytes = absl::GetFlag(FLAGS_max_name_bytes);
  l.max_string_bytes = absl::GetFlag(FLAGS_max_string_bytes);
  l.max_call_id_bytes = absl::GetFlag(FLAGS_max_call_id_bytes);
  FARCALL_RETURN_IF_ERROR(ValidateHeaderLimits(l));
  return l;
}

absl::StatusOr<int64_t> MaxMessageBytesFromFlags() {
  constexpr int64_t kMin = 1 << 20;
  constexpr int64_t kMax = std::numeric_limits<int>::max();
  const int64_t v = absl::GetFlag(FLAGS_max_message_bytes);
  if (v < kMin || v > kMax) {
    return absl::InvalidArgumentError(absl::StrCat("--max_message_bytes must be between ", kMin,
                                                   " and ", kMax, "; got ", v, "."));
  }
  return v;
}

absl::StatusOr<GrpcServerLimits> GrpcServerLimitsFromFlags() {
  GrpcServerLimits l;
  FARCALL_ASSIGN_OR_RETURN(int64_t message_bytes, MaxMessageBytesFromFlags());
  l.max_message_bytes = static_cast<int>(message_bytes);
  const int64_t streams = absl::GetFlag(FLAGS_max_concurrent_streams);
  if (streams < 1 || streams > std::numeric_limits<int>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_concurrent_streams must be between 1 and ",
                     std::numeric_limits<int>::max(), "; got ", streams, "."));
  }
  l.max_concurrent_streams = static_cast<int>(streams);
  l.memory_bytes = absl::GetFlag(FLAGS_grpc_memory_bytes);
  if (l.memory_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--grpc_memory_bytes must be 0 or positive; got ", l.memory_bytes, "."));
  }
  const double drain = absl::GetFlag(FLAGS_drain_seconds);
  if (!(drain >= 0 && drain <= 86400)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--drain_seconds must be between 0 and 86400; got ", drain, "."));
  }
  l.drain = absl::Seconds(drain);
  l.max_connection_age = absl::GetFlag(FLAGS_max_connection_age);
  l.max_connection_age_grace = absl::GetFlag(FLAGS_max_connection_age_grace);
  for (auto [name, d] : {std::pair{"--max_connection_age", l.max_connection_age},
                         std::pair{"--max_connection_age_grace", l.max_connection_age_grace}}) {
    if (d < absl::ZeroDuration() || d > absl::Hours(24 * 365)) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " must be between 0 and 8760h; got ", absl::FormatDuration(d), "."));
    }
  }
  return l;
}

}  // namespace farcall
