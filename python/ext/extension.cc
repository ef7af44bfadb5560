#include "python/ext/extension.h"
#include "core/error_reason.h"

#include "absl/strings/str_cat.h"
#include "core/dtype.h"
#include "core/process.h"
#include "nanobind/stl/string.h"

namespace nb = nanobind;

namespace farcall::python {
namespace {
nb::object* error_factory = nullptr;  // never freed: lives as long as the module
}  // namespace

std::string CodeName(absl::StatusCode code) {
  // absl's names are gRPC's ("INVALID_ARGUMENT") for every code.
  return absl::StatusCodeToString(code);
}

bool PythonAlive() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsInitialized() && !Py_IsFinalizing();
#else
  return Py_IsInitialized() && !_Py_IsFinalizing();
#endif
}

void RaiseStatus(const absl::Status& status) {
  if (error_factory == nullptr) throw std::runtime_error(status.ToString());
  nb::object exc =
      (*error_factory)(CodeName(status.code()), std::string(status.message()), TracebackOf(status),
                       DidNotRun(status), ReasonOf(status) == ErrorReason::kHandlerError,
                       ReasonOf(status) == ErrorReason::kResidentLost);
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
  throw nb::python_error();
}

}  // namespace farcall::python

NB_MODULE(_farcall, m) {
  using namespace farcall::python;
  m.doc() = "farcall's native layer; use the farcall package, not this module.";
  // Deadlock detection off for farcall's and gRPC's Abseil (jaxlib has its
  // own): as in farcall's binaries, a lock must not cost a graph update.
  farcall::InitFarcallProcess();
  m.def("_set_error_factory", [](nb::object f) {
    if (error_factory == nullptr) error_factory = new nb::object();
    *error_factory = std::move(f);
  });
  // numpy's dtype names (as ml_dtypes spells the 8-bit floats) to the wire's
  // DType numbers, which are XLA's.
  m.def("dtype_codes", [] {
    nb::dict d;
    for (farcall::DType t : farcall::AllDTypes()) {
      d[nb::str(std::string(farcall::DTypeName(t)).c_str())] = static_cast<int>(t);
    }
    return d;
  });
  DefineClient(m);
  DefineAgent(m);
  DefineFfi(m);
}
