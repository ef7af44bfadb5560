# Which device backends to build: each one whose toolkit is found.
#   cpu     always;
#   cuda    when nvcc is found (CUDAToolkit_ROOT, or /usr/local/cuda);
#   rocm    when hipcc and libamdhip64 are found (Debian's hipcc 5.2);
#   oneapi  when OpenCL is found (ocl-icd-opencl-dev and opencl-headers).
# FARCALL_REQUIRE_BACKENDS (e.g. "cuda;rocm;oneapi") turns a missing toolkit
# into a configure error; CI sets it so that every platform is built.

set(FARCALL_REQUIRE_BACKENDS "" CACHE STRING
    "backends whose toolkit must be found (cuda, rocm, oneapi)")
set(FARCALL_DISABLE_BACKENDS "" CACHE STRING
    "backends not to build even if their toolkit is found (cuda, rocm, oneapi)")
set(FARCALL_CUDA_ARCHITECTURES "80-real;90" CACHE STRING
    "CUDA architectures for the built-in kernels")
set(FARCALL_HIP_ARCHITECTURES "gfx908;gfx90a;gfx1030" CACHE STRING
    "AMD GPU targets for the built-in kernels")

# --- cuda ---------------------------------------------------------------
if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
  set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
endif()
include(CheckLanguage)
check_language(CUDA)
set(FARCALL_WITH_CUDA OFF)
if(CMAKE_CUDA_COMPILER AND NOT "cuda" IN_LIST FARCALL_DISABLE_BACKENDS)
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES ${FARCALL_CUDA_ARCHITECTURES})
  endif()
  # The runtime is linked statically: agents need only the driver.
  set(CMAKE_CUDA_RUNTIME_LIBRARY Static)
  enable_language(CUDA)
  set(CMAKE_CUDA_STANDARD 17)  # what CMake 3.25 knows for nvcc; the kernels need no more
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  if(FARCALL_CCACHE AND NOT CMAKE_CUDA_COMPILER_LAUNCHER)
    set(CMAKE_CUDA_COMPILER_LAUNCHER ${FARCALL_CCACHE})
  endif()
  find_package(CUDAToolkit REQUIRED)
  set(FARCALL_WITH_CUDA ON)
endif()

# --- rocm ---------------------------------------------------------------
find_program(FARCALL_HIPCC hipcc)
find_library(FARCALL_AMDHIP64 amdhip64)
set(FARCALL_WITH_ROCM OFF)
if(FARCALL_HIPCC AND FARCALL_AMDHIP64)
  set(FARCALL_WITH_ROCM ON)
endif()

# --- oneapi (OpenCL) ----------------------------------------------------
find_package(OpenCL QUIET)
set(FARCALL_WITH_ONEAPI OFF)
if(OpenCL_FOUND)
  set(FARCALL_WITH_ONEAPI ON)
endif()

foreach(b ${FARCALL_DISABLE_BACKENDS})
  string(TOUPPER ${b} B)
  set(FARCALL_WITH_${B} OFF)
endforeach()

foreach(b ${FARCALL_REQUIRE_BACKENDS})
  string(TOUPPER ${b} B)
  if(NOT DEFINED FARCALL_WITH_${B})
    message(FATAL_ERROR "FARCALL_REQUIRE_BACKENDS: unknown backend '${b}' "
                        "(cuda, rocm or oneapi)")
  endif()
  if(NOT FARCALL_WITH_${B})
    message(FATAL_ERROR "FARCALL_REQUIRE_BACKENDS asks for ${b}, but its toolkit "
                        "was not found; run scripts/install_deps.sh")
  endif()
endforeach()
message(STATUS "farcall: toolkits found: cuda=${FARCALL_WITH_CUDA} "
               "rocm=${FARCALL_WITH_ROCM} oneapi=${FARCALL_WITH_ONEAPI}")
