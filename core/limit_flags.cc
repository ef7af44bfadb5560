#include "core/limit_flags.h"

#include <limits>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

ABSL_FLAG(int64_t, max_message_bytes, 64 << 20,
          "largest single gRPC message, in bytes (bounds a unary Call)");
ABSL_FLAG(int64_t, max_header_bytes, 1 << 20, "largest encoded call header, in bytes");
ABSL_FLAG(int64_t, max_tensors, 1024, "most tensors (args plus results) one call may declare");
ABSL_FLAG(int64_t, max_rank, 64, "most dims one tensor may have");
ABSL_FLAG(int64_t, max_attributes, 256, "most attributes one call may carry");
ABSL_FLAG(int64_t, max_name_bytes, 1024,
          "longest handler, platform or attribute name, in bytes");
ABSL_FLAG(int64_t, max_string_bytes, 1 << 20, "longest string attribute, in bytes");

namespace farcall {

absl::StatusOr<HeaderLimits> HeaderLimitsFromFlags() {
  HeaderLimits l;
  l.max_header_bytes = absl::GetFlag(FLAGS_max_header_bytes);
  l.max_tensors = absl::GetFlag(FLAGS_max_tensors);
  l.max_rank = absl::GetFlag(FLAGS_max_rank);
  l.max_attributes = absl::GetFlag(FLAGS_max_attributes);
  l.max_name_bytes = absl::GetFlag(FLAGS_max_name_bytes);
  l.max_string_bytes = absl::GetFlag(FLAGS_max_string_bytes);
  FARCALL_RETURN_IF_ERROR(ValidateHeaderLimits(l));
  return l;
}

absl::StatusOr<int64_t> MaxMessageBytesFromFlags() {
  constexpr int64_t kMin = 1 << 20;
  constexpr int64_t kMax = std::numeric_limits<int>::max();
  const int64_t v = absl::GetFlag(FLAGS_max_message_bytes);
  if (v < kMin || v > kMax) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_message_bytes must be between ", kMin, " and ", kMax, "; got ", v, "."));
  }
  return v;
}

}  // namespace farcall
