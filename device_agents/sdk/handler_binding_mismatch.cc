// Must not compile (handler_binding_mismatch_test): a handler whose
// parameters do not fit its binding is refused at compile time, with the
// SDK's own message instead of an error deep inside std::apply.
#include "farcall/handler.h"

namespace farcall::sdk {

Status CallsAMismatchedHandler(CallFrame& call) {
  const auto binding = Bind().Arg<Tensor<FARCALL_DTYPE_F32>>().Attr<double>("alpha");
  // The binding gives a tensor and a double; this takes an int first.
  return binding.Call([](int, double) { return OkStatus(); }, call);
}

}  // namespace farcall::sdk
