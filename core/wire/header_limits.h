// Bounds on what one call header may declare, checked on its encoded bytes
// before they are parsed. A parsed header costs far more memory than its
// bytes (a zero-size TensorSpec is 2 bytes on the wire and an object of
// dozens in memory), so a hostile header is refused while it is still bytes.
//
//   HeaderLimits limits;                       // the defaults below
//   absl::Status s = CheckHeaderLimits(bytes, limits);
//   if (s.ok()) header.ParseFromArray(...);
//
// Agents and routers take the limits as flags (--max_header_bytes,
// --max_tensors, --max_rank, --max_attributes, --max_name_bytes,
// --max_string_bytes, --max_call_id_bytes). Besides args and results,
// --max_tensors bounds the input_output_aliases entries and each list of a
// shared-memory call's offsets and region names; --max_name_bytes bounds
// each region name.
#ifndef FARCALL_CORE_WIRE_HEADER_LIMITS_H_
#define FARCALL_CORE_WIRE_HEADER_LIMITS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace farcall {

struct HeaderLimits {
  int64_t max_header_bytes = 1 << 20;  // the encoded header
  int64_t max_tensors = 1024;          // args plus results
  int64_t max_rank = 64;               // dims of one tensor
  int64_t max_attributes = 256;
  int64_t max_name_bytes = 1024;       // handler, platform and attribute names
  int64_t max_string_bytes = 1 << 20;  // a string attribute's value
  int64_t max_call_id_bytes = 128;     // the call_id
};

// OK when `header` (an encoded farcall.v1.CallHeader) is within `limits`;
// RESOURCE_EXHAUSTED naming the limit and its flag otherwise. Bytes that do
// not parse are left for the parser to refuse. Allocates nothing.
absl::Status CheckHeaderLimits(absl::string_view header, const HeaderLimits& limits);

// INVALID_ARGUMENT unless every limit is positive.
absl::Status ValidateHeaderLimits(const HeaderLimits& limits);

// The names a request outside a call header carries (Router.Resolve's
// handler and platform), bounded as a header's are: RESOURCE_EXHAUSTED
// with the same message.
absl::Status CheckNameLimits(absl::string_view handler, absl::string_view platform,
                             const HeaderLimits& limits);

}  // namespace farcall

#endif  // FARCALL_CORE_WIRE_HEADER_LIMITS_H_
