// A handler plugin built against the installed handler SDK alone, in C++17:
//   consumer.twice   float32 x -> 2 * x (a typed binding checks the call)
#include "farcall/handler.h"

namespace {

using F32 = farcall::sdk::Tensor<FARCALL_DTYPE_F32>;

farcall::sdk::Status TwiceImpl(F32 x, F32 y) {
  for (int64_t i = 0; i < x.element_count(); ++i) y.data()[i] = 2 * x.data()[i];
  return farcall::sdk::OkStatus();
}
FARCALL_BOUND_HANDLER(Twice, TwiceImpl, farcall::sdk::Bind("consumer.twice").Arg<F32>().Ret<F32>());

}  // namespace

FARCALL_PLUGIN("twice_plugin", FARCALL_HANDLER_DEF("consumer.twice", "cpu",
                                                   FARCALL_TRAIT_WRITES_ALL_RESULTS, Twice));
