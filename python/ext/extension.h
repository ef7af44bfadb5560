// The farcall Python extension, `farcall._farcall`: one module over the C++
// client, the agent and (when jaxlib's headers were found at build time) the
// XLA FFI handler, so that one copy of farcall's generated protobuf code is
// in the process (two copies abort at import).
//
// Layers:
//   1. farcall/*.py: the public Python API (Client, Spec, errors, the JAX
//      drop-in, the Python agent). It turns Python objects into plain
//      pointers, dtype codes and shapes before calling down.
//   2. This extension: thin bindings that release the GIL around every call
//      into the C++ client or agent.
//   3. The C++ client (client/) and agent (device_agents/).
#ifndef FARCALL_PYTHON_EXT_EXTENSION_H_
#define FARCALL_PYTHON_EXT_EXTENSION_H_

#include <string>

#include "absl/status/status.h"
#include "nanobind/nanobind.h"

namespace farcall::python {

// Each file's part of the module.
void DefineClient(nanobind::module_& m);
void DefineAgent(nanobind::module_& m);
void DefineFfi(nanobind::module_& m);  // empty when built without jaxlib

// Raises the farcall.Error subclass for `status` (set up by farcall/_errors.py
// through _set_error_factory). Call with the GIL held.
[[noreturn]] void RaiseStatus(const absl::Status& status);

// The gRPC name of a code: "NOT_FOUND".
std::string CodeName(absl::StatusCode code);

// True while the interpreter can still take the GIL (not finalizing).
bool PythonAlive();

}  // namespace farcall::python

#endif  // FARCALL_PYTHON_EXT_EXTENSION_H_
