// Built instead of ffi_handler.cc when jaxlib's FFI headers were not found:
// farcall.jax then falls back to jax.pure_callback on every backend.
#include "python/ext/extension.h"

namespace nb = nanobind;

namespace farcall::python {

void DefineFfi(nb::module_& m) {
  m.def("ffi_handlers", [] { return nb::dict(); });
  m.def("ffi_cpu_halves", [] { return nb::dict(); });
}

}  // namespace farcall::python
