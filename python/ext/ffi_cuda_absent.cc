// Built instead of ffi_cuda.cc without the CUDA toolkit: no cuda handler.
#include "python/ext/ffi_call.h"

namespace farcall::python {

void AddCudaFfiHandler(nanobind::dict&) {}

}  // namespace farcall::python
