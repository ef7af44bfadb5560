// test.half for cuda, as tests/plugins/side_effect_plugin.cc has it for cpu:
// no args; result uint8[n]: writes 7 to the first half on the call's
// stream, leaving the rest as the agent gave it. Lets
// tests/result_zeroing_test.cc check that device memory is zeroed too.
#include <cuda_runtime.h>  // before handler.h: enables CallFrame::cuda_stream()

#include <string>

#include "farcall/handler.h"

namespace {

using farcall::sdk::CallFrame;
using farcall::sdk::InvalidArgument;
using farcall::sdk::OkStatus;
using farcall::sdk::Status;

Status Half(CallFrame& call) {
  if (call.num_args() != 0 || call.num_results() != 1 ||
      call.result(0).dtype() != FARCALL_DTYPE_U8) {
    return InvalidArgument("test.half: no args, one uint8 result");
  }
  const auto n = static_cast<size_t>(call.result(0).element_count());
  const cudaError_t e =
      cudaMemsetAsync(call.result(0).data<uint8_t>(), 7, n / 2, call.cuda_stream());
  if (e != cudaSuccess) {
    return farcall::sdk::Internal(std::string("test.half: ") + cudaGetErrorString(e));
  }
  return OkStatus();
}

}  // namespace

FARCALL_PLUGIN("farcall_half_cuda_plugin", FARCALL_HANDLER_DEF("test.half", "cuda", 0, Half));
