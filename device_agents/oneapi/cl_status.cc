#include "device_agents/oneapi/cl_status.h"

#include "absl/strings/str_cat.h"

namespace farcall::agent::oneapi {

const char* ClErrorName(cl_int error) {
  switch (error) {
#define FARCALL_CL_CASE(name) \
  case name:                  \
    return #name;
    FARCALL_CL_CASE(CL_DEVICE_NOT_FOUND)
    FARCALL_CL_CASE(CL_DEVICE_NOT_AVAILABLE)
    FARCALL_CL_CASE(CL_COMPILER_NOT_AVAILABLE)
    FARCALL_CL_CASE(CL_MEM_OBJECT_ALLOCATION_FAILURE)
    FARCALL_CL_CASE(CL_OUT_OF_RESOURCES)
    FARCALL_CL_CASE(CL_OUT_OF_HOST_MEMORY)
    FARCALL_CL_CASE(CL_BUILD_PROGRAM_FAILURE)
    FARCALL_CL_CASE(CL_MAP_FAILURE)
    FARCALL_CL_CASE(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST)
    FARCALL_CL_CASE(CL_INVALID_VALUE)
    FARCALL_CL_CASE(CL_INVALID_PLATFORM)
    FARCALL_CL_CASE(CL_INVALID_DEVICE)
    FARCALL_CL_CASE(CL_INVALID_CONTEXT)
    FARCALL_CL_CASE(CL_INVALID_COMMAND_QUEUE)
    FARCALL_CL_CASE(CL_INVALID_MEM_OBJECT)
    FARCALL_CL_CASE(CL_INVALID_PROGRAM)
    FARCALL_CL_CASE(CL_INVALID_KERNEL_NAME)
    FARCALL_CL_CASE(CL_INVALID_KERNEL)
    FARCALL_CL_CASE(CL_INVALID_ARG_INDEX)
    FARCALL_CL_CASE(CL_INVALID_ARG_VALUE)
    FARCALL_CL_CASE(CL_INVALID_ARG_SIZE)
    FARCALL_CL_CASE(CL_INVALID_KERNEL_ARGS)
    FARCALL_CL_CASE(CL_INVALID_WORK_GROUP_SIZE)
    FARCALL_CL_CASE(CL_INVALID_GLOBAL_WORK_SIZE)
    FARCALL_CL_CASE(CL_INVALID_EVENT)
    FARCALL_CL_CASE(CL_INVALID_OPERATION)
    FARCALL_CL_CASE(CL_INVALID_BUFFER_SIZE)
#undef FARCALL_CL_CASE
    case -1001:
      return "CL_PLATFORM_NOT_FOUND_KHR";
    default:
      return "CL_UNKNOWN_ERROR";
  }
}

bool IsStickyClError(cl_int error) { return error == CL_DEVICE_NOT_AVAILABLE; }

absl::Status ClErrorToStatus(cl_int error, const char* expr) {
  const std::string message =
      absl::StrCat("oneapi: ", expr, " failed: ", ClErrorName(error), " (", error, ")");
  switch (error) {
    case CL_MEM_OBJECT_ALLOCATION_FAILURE:
    case CL_OUT_OF_RESOURCES:
    case CL_OUT_OF_HOST_MEMORY:
    case CL_INVALID_BUFFER_SIZE:
      return absl::ResourceExhaustedError(message);
    case CL_DEVICE_NOT_FOUND:
    case -1001:  // CL_PLATFORM_NOT_FOUND_KHR: no ICD installed
      return absl::FailedPreconditionError(message);
    default:
      return absl::InternalError(message);
  }
}

}  // namespace farcall::agent::oneapi
