// FARCALL_CL_RETURN_IF_ERROR: the one place a cl_int error code turns into
// a Status, for the oneapi (OpenCL) backend.
#ifndef FARCALL_DEVICE_AGENTS_ONEAPI_CL_STATUS_H_
#define FARCALL_DEVICE_AGENTS_ONEAPI_CL_STATUS_H_

#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>

#include "absl/status/status.h"

namespace farcall::agent::oneapi {

// The OpenCL name of an error code, e.g. "CL_OUT_OF_RESOURCES".
const char* ClErrorName(cl_int error);

// RESOURCE_EXHAUSTED for the out-of-memory codes, FAILED_PRECONDITION for
// "no platform or device", INTERNAL otherwise. CL_DEVICE_NOT_AVAILABLE is
// sticky: the device stays failed (see IsStickyClError).
absl::Status ClErrorToStatus(cl_int error, const char* expr);
bool IsStickyClError(cl_int error);

}  // namespace farcall::agent::oneapi

#define FARCALL_CL_RETURN_IF_ERROR(expr)                                          \
  do {                                                                            \
    const cl_int farcall_cl_error_ = (expr);                                      \
    if (farcall_cl_error_ != CL_SUCCESS) {                                        \
      return ::farcall::agent::oneapi::ClErrorToStatus(farcall_cl_error_, #expr); \
    }                                                                             \
  } while (0)

#endif  // FARCALL_DEVICE_AGENTS_ONEAPI_CL_STATUS_H_
