// An example handler plugin, built the way a third party would build one:
// only farcall/handler.h, compiled with hidden visibility.
//
//   farcall-agent --platform=cpu --plugins=/path/to/farcall_example_plugin.so
//
// It adds two cpu handlers:
//   example.negate   float32 x -> float32 -x (same spec; may alias {0: 0})
//   example.clip     float32 x -> x clipped to [lo, hi] (attributes lo, hi: f64)
// Each is a binding (what it takes, checked before its body runs) and its
// math; see docs/handlers.md.
#include <algorithm>
#include <string>

#include "farcall/handler.h"

namespace {

using farcall::sdk::Bind;
using farcall::sdk::InvalidArgument;
using farcall::sdk::OkStatus;
using farcall::sdk::Status;
using F32 = farcall::sdk::Tensor<FARCALL_DTYPE_F32>;

Status SameShape(const char* handler, const F32& x, const F32& y) {
  if (x.rank() != y.rank() || !std::equal(x.dims().begin(), x.dims().end(), y.dims().begin())) {
    return InvalidArgument(std::string(handler) + ": arg and result must have the same shape");
  }
  return OkStatus();
}

Status NegateImpl(F32 x, F32 y) {
  if (Status s = SameShape("example.negate", x, y); !s.ok()) return s;
  for (int64_t i = 0; i < x.element_count(); ++i) y.data()[i] = -x.data()[i];
  return OkStatus();
}
FARCALL_BOUND_HANDLER(Negate, NegateImpl, Bind("example.negate").Arg<F32>().Ret<F32>());

Status ClipImpl(F32 x, double lo, double hi, F32 y) {
  if (Status s = SameShape("example.clip", x, y); !s.ok()) return s;
  if (lo > hi) return InvalidArgument("example.clip: needs lo <= hi");
  for (int64_t i = 0; i < x.element_count(); ++i) {
    y.data()[i] = std::clamp(x.data()[i], static_cast<float>(lo), static_cast<float>(hi));
  }
  return OkStatus();
}
FARCALL_BOUND_HANDLER(
    Clip, ClipImpl,
    Bind("example.clip").Arg<F32>().Attr<double>("lo").Attr<double>("hi").Ret<F32>());

}  // namespace

#ifndef FARCALL_EXAMPLE_PLUGIN_ABI_MAJOR
// Both write every element of their result: the agent need not zero it.
FARCALL_PLUGIN("farcall_example_plugin",
               FARCALL_HANDLER_DEF("example.negate", "cpu", FARCALL_TRAIT_WRITES_ALL_RESULTS,
                                   Negate),
               FARCALL_HANDLER_DEF("example.clip", "cpu", FARCALL_TRAIT_WRITES_ALL_RESULTS, Clip));
#else
// Test build only: a plugin that claims another ABI major version, which an
// agent must refuse.
extern "C" __attribute__((visibility("default"))) const FarcallPlugin* FarcallPluginGet(void) {
  static const FarcallHandlerDef kDefs[] = {
      FARCALL_HANDLER_DEF("example.negate", "cpu", 0, Negate)};
  static const FarcallPlugin kPlugin = {
      sizeof(FarcallPlugin),
      {sizeof(FarcallApiVersion), FARCALL_EXAMPLE_PLUGIN_ABI_MAJOR, 0},
      "farcall_wrong_abi_plugin",
      1,
      kDefs};
  return &kPlugin;
}
#endif
