// A plugin for tests, built like a third-party one: handlers whose effects
// a test can observe.
//   test.count   no args; result int64[1]: a counter of this process,
//                incremented by each run (a side effect)
//   test.half    no args; result uint8[n]: writes 7 to the first half only,
//                leaving the rest as the agent gave it
//   test.count_then_fail  no args, no results; increments the counter, then
//                fails with the status code in attribute `code`
#include <atomic>
#include <cstdint>
#include <cstring>

#include "farcall/handler.h"

namespace {

using farcall::sdk::CallFrame;
using farcall::sdk::InvalidArgument;
using farcall::sdk::OkStatus;
using farcall::sdk::Status;

std::atomic<int64_t> g_count{0};

Status Count(CallFrame& call) {
  if (call.num_args() != 0 || call.num_results() != 1 ||
      call.result(0).dtype() != FARCALL_DTYPE_S64 || call.result(0).element_count() != 1) {
    return InvalidArgument("test.count: no args, one int64[1] result");
  }
  *call.result(0).data<int64_t>() = ++g_count;
  return OkStatus();
}

Status Half(CallFrame& call) {
  if (call.num_args() != 0 || call.num_results() != 1 ||
      call.result(0).dtype() != FARCALL_DTYPE_U8) {
    return InvalidArgument("test.half: no args, one uint8 result");
  }
  const int64_t n = call.result(0).element_count();
  std::memset(call.result(0).data<uint8_t>(), 7, static_cast<size_t>(n / 2));
  return OkStatus();
}

Status CountThenFail(CallFrame& call) {
  ++g_count;
  const int64_t code = call.GetI64("code").value_or(FARCALL_CODE_INTERNAL);
  return Status(static_cast<FarcallCode>(code), "test.count_then_fail: the handler failed");
}

}  // namespace

FARCALL_PLUGIN("farcall_side_effect_plugin", FARCALL_HANDLER_DEF("test.count", "cpu", 0, Count),
               FARCALL_HANDLER_DEF("test.half", "cpu", 0, Half),
               FARCALL_HANDLER_DEF("test.count_then_fail", "cpu", 0, CountThenFail));
