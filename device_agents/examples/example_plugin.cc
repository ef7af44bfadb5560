// An example handler plugin, built the way a third party would build one:
// only farcall/handler.h, compiled with hidden visibility.
//
//   farcall-agent --platform=cpu --plugins=/path/to/farcall_example_plugin.so
//
// It adds two cpu handlers:
//   example.negate   float32 x -> float32 -x (same spec; may alias {0: 0})
//   example.clip     float32 x -> x clipped to [lo, hi] (attributes lo, hi: f64)
#include <algorithm>
#include <string>

#include "farcall/handler.h"

namespace {

using farcall::sdk::CallFrame;
using farcall::sdk::InvalidArgument;
using farcall::sdk::OkStatus;
using farcall::sdk::Status;

Status CheckUnaryFloat32(const CallFrame& call, const char* name) {
  if (call.num_args() != 1 || call.num_results() != 1) {
    return InvalidArgument(std::string(name) + ": takes one arg and one result");
  }
  if (call.arg(0).dtype() != FARCALL_DTYPE_F32 || !call.arg(0).SameSpec(call.result(0))) {
    return InvalidArgument(std::string(name) +
                           ": arg and result must both be the same float32 spec");
  }
  return OkStatus();
}

Status Negate(CallFrame& call) {
  Status s = CheckUnaryFloat32(call, "example.negate");
  if (!s.ok()) return s;
  const float* x = call.arg(0).data<float>();
  float* y = call.result(0).data<float>();
  const int64_t n = call.arg(0).element_count();
  for (int64_t i = 0; i < n; ++i) y[i] = -x[i];
  return OkStatus();
}

Status Clip(CallFrame& call) {
  Status s = CheckUnaryFloat32(call, "example.clip");
  if (!s.ok()) return s;
  auto lo = call.GetF64("lo");
  auto hi = call.GetF64("hi");
  if (!lo || !hi || *lo > *hi) {
    return InvalidArgument("example.clip: needs attributes lo <= hi (f64)");
  }
  const float* x = call.arg(0).data<float>();
  float* y = call.result(0).data<float>();
  const int64_t n = call.arg(0).element_count();
  for (int64_t i = 0; i < n; ++i) {
    y[i] = std::clamp(x[i], static_cast<float>(*lo), static_cast<float>(*hi));
  }
  return OkStatus();
}

}  // namespace

#ifndef FARCALL_EXAMPLE_PLUGIN_ABI_MAJOR
// Both write every element of their result: the agent need not zero it.
FARCALL_PLUGIN("farcall_example_plugin",
               FARCALL_HANDLER_DEF("example.negate", "cpu", FARCALL_TRAIT_WRITES_ALL_RESULTS,
                                   Negate),
               FARCALL_HANDLER_DEF("example.clip", "cpu", FARCALL_TRAIT_WRITES_ALL_RESULTS,
                                   Clip));
#else
// Test build only: a plugin that claims another ABI major version, which an
// agent must refuse.
extern "C" __attribute__((visibility("default"))) const FarcallPlugin*
FarcallPluginGet(void) {
  static const FarcallHandlerDef kDefs[] = {
      FARCALL_HANDLER_DEF("example.negate", "cpu", 0, Negate)};
  static const FarcallPlugin kPlugin = {
      sizeof(FarcallPlugin),
      {sizeof(FarcallApiVersion), FARCALL_EXAMPLE_PLUGIN_ABI_MAJOR, 0},
      "farcall_wrong_abi_plugin", 1, kDefs};
  return &kPlugin;
}
#endif
