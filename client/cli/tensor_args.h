// Command-line forms of tensors, aliases and attributes for the farcall tool.
//
//   farcall call my_handler --arg float32[4,8]:random --arg x.npy
//       --arg w.npy:bfloat16 --alias 0:0 --attr scale=2.5 --attr name=str:abc
//
// All functions are pure and thread-safe. Errors are INVALID_ARGUMENT and
// quote the text they were given (a missing .npy file is NOT_FOUND).
#ifndef FARCALL_CLIENT_CLI_TENSOR_ARGS_H_
#define FARCALL_CLIENT_CLI_TENSOR_ARGS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <variant>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/cli/host_tensor.h"
#include "core/tensor_spec.h"

namespace farcall::cli {

// A call attribute, as in farcall.v1.Attribute.
using AttrValue = std::variant<int64_t, double, bool, std::string>;

// Builds a tensor from one of:
//   PATH.npy           the file, with its own dtype (see npy.h)
//   PATH.npy:DTYPE     the file's bytes reinterpreted as DTYPE, e.g.
//                      x.npy:bfloat16 (the item sizes must match)
//   SPEC[:FILL]        SPEC as ParseTensorSpec reads it (float32[4,8],
//                      int32[]) and FILL one of
//       iota     0, 1, 2, ... in row-major order (the default); integers
//                wrap around like numpy's casts, bool alternates
//                false, true, ...
//       zeros, ones
//       random   a fixed sequence (the same on every run and platform):
//                floats uniform in [-1, 1) (both parts for complex), signed
//                integers in [-8, 8], unsigned in [0, 16], random bools
//       a number 2.5, -3, 1e3, inf, nan, true, false: every element. It must
//                fit the dtype exactly for integers and bool (int8[2]:300 and
//                int32[2]:2.5 are errors); floats round to nearest. Complex
//                numbers get it as the real part, imaginary part 0.
// Works for every dtype in AllDTypes().
absl::StatusOr<HostTensor> ParseTensorArg(absl::string_view text);

// A short, numpy-like, one-line rendering for printing results:
//   "float32[2,2] [0, 1.5, 2, 3]", "int32[] 7", "complex64[1] [(1+2j)]",
//   "bool[2] [true, false]", "int8[100] [0, 1, 2, 3, ..., 96, 97, 98, 99]".
// The elements are flat, in row-major order. With more than `max_elements`,
// it shows the first and last max_elements / 2 (rounding the first half
// up) around "...". Floats print as %g (6 significant digits). If `size`
// does not match the spec, it says so instead of reading the data.
std::string FormatTensor(const TensorSpec& spec, const void* data, size_t size,
                         int max_elements = 8);

// "IN:OUT", e.g. "0:1": input IN aliases output OUT.
absl::StatusOr<std::pair<uint32_t, uint32_t>> ParseAlias(absl::string_view text);

// "name=value". The value is:
//   str:TEXT            the string TEXT (to force a string, e.g. str:12)
//   true, false         bool
//   [+-]digits          int64 (INVALID_ARGUMENT if it does not fit)
//   a number with '.', 'e' or 'E' (2.5, 1e-3)   double
//   anything else       the string as written (including "")
absl::StatusOr<std::pair<std::string, AttrValue>> ParseAttr(absl::string_view text);

}  // namespace farcall::cli

#endif  // FARCALL_CLIENT_CLI_TENSOR_ARGS_H_
