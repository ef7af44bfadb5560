// libFuzzer: the pre-parse header check. Besides not crashing, it must keep
// its promise: a header it lets through parses into no more tensors, rank
// or attributes than the limits.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "core/wire/header_limits.h"
#include "farcall/v1/farcall.pb.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  farcall::HeaderLimits limits;
  limits.max_tensors = 8;
  limits.max_rank = 4;
  limits.max_attributes = 4;
  limits.max_name_bytes = 32;
  limits.max_string_bytes = 64;
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  if (!farcall::CheckHeaderLimits(bytes, limits).ok()) return 0;
  farcall::v1::CallHeader h;
  if (!h.ParseFromArray(data, static_cast<int>(size))) return 0;
  if (h.args_size() + h.results_size() > limits.max_tensors) std::abort();
  for (const auto* specs : {&h.args(), &h.results()}) {
    for (const farcall::v1::TensorSpec& t : *specs) {
      if (t.dims_size() > limits.max_rank) std::abort();
    }
  }
  if (h.attributes_size() > limits.max_attributes) std::abort();
  if (static_cast<int64_t>(h.handler().size()) > limits.max_name_bytes) std::abort();
  for (const auto& [name, value] : h.attributes()) {
    if (static_cast<int64_t>(name.size()) > limits.max_name_bytes) std::abort();
    if (static_cast<int64_t>(value.str().size()) > limits.max_string_bytes) std::abort();
  }
  return 0;
}
