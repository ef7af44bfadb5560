// TensorSpec (farcall/tensor_spec.h, the public part) and what farcall's own
// code does with one: byte sizes checked for overflow, and parsing.
#ifndef FARCALL_CORE_TENSOR_SPEC_H_
#define FARCALL_CORE_TENSOR_SPEC_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/dtype.h"
#include "farcall/tensor_spec.h"

namespace farcall {

// ElementCount() (assumes a valid spec, see ByteSize) and SpecToString(): in
// farcall/tensor_spec.h.

// Byte size. INVALID_ARGUMENT for an unknown dtype, a negative dim, or a
// size that overflows int64. `what` names the tensor in the message, e.g.
// "args[2]".
absl::StatusOr<int64_t> ByteSize(const TensorSpec& spec, absl::string_view what);

// Parses what SpecToString writes. INVALID_ARGUMENT with the reason.
absl::StatusOr<TensorSpec> ParseTensorSpec(absl::string_view text);

}  // namespace farcall

#endif  // FARCALL_CORE_TENSOR_SPEC_H_
