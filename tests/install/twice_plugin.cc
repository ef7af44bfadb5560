// A handler plugin built against the installed handler SDK alone:
//   consumer.twice   float32 x -> 2 * x (same spec)
#include <string>

#include "farcall/handler.h"

namespace {

farcall::sdk::Status Twice(farcall::sdk::CallFrame& call) {
  if (call.num_args() != 1 || call.num_results() != 1 ||
      call.arg(0).dtype() != FARCALL_DTYPE_F32 || !call.arg(0).SameSpec(call.result(0))) {
    return farcall::sdk::InvalidArgument("consumer.twice: one float32 arg, a result like it");
  }
  const float* x = call.arg(0).data<float>();
  float* y = call.result(0).data<float>();
  for (int64_t i = 0; i < call.arg(0).element_count(); ++i) y[i] = 2 * x[i];
  return farcall::sdk::OkStatus();
}

}  // namespace

FARCALL_PLUGIN("twice_plugin",
               FARCALL_HANDLER_DEF("consumer.twice", "cpu", FARCALL_TRAIT_WRITES_ALL_RESULTS,
                                   Twice));
