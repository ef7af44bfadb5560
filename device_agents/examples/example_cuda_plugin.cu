// An example CUDA handler plugin: a small kernel and its registration, built
// the way a third party would build one, with nvcc, only farcall/handler.h
// and hidden visibility.
//
//   farcall-agent --platform=cuda --plugins=/path/to/farcall_example_cuda_plugin.so
//
// It adds one cuda handler:
//   example.negate   float32 x -> float32 -x (same spec; may alias {0: 0})
// registered command_buffer_compatible: it only enqueues a kernel on the
// call's stream, so the agent captures it as a CUDA graph once per shape.
#include <cuda_runtime.h>  // before handler.h: enables CallFrame::cuda_stream()

#include <string>

#include "farcall/handler.h"

namespace {

using farcall::sdk::Bind;
using farcall::sdk::CallFrame;
using farcall::sdk::InvalidArgument;
using farcall::sdk::OkStatus;
using farcall::sdk::Status;
using F32 = farcall::sdk::Tensor<FARCALL_DTYPE_F32>;

__global__ void NegateKernel(const float* x, float* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    y[i] = -x[i];
  }
}

// The binding has checked the dtypes; the body checks the shapes, then
// enqueues the kernel on the call's stream and never synchronises.
Status NegateImpl(F32 x, CallFrame& call, F32 y) {
  if (x.element_count() != y.element_count()) {
    return InvalidArgument("example.negate: arg and result must have the same shape");
  }
  const int64_t n = x.element_count();
  if (n == 0) return OkStatus();
  const int threads = 256;
  const int64_t blocks = (n + threads - 1) / threads;
  NegateKernel<<<static_cast<unsigned>(blocks < 4096 ? blocks : 4096), threads, 0,
                 call.cuda_stream()>>>(x.data(), y.data(), n);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) {
    return farcall::sdk::Internal(std::string("example.negate: launch failed: ") +
                                  cudaGetErrorString(e));
  }
  return OkStatus();
}
FARCALL_BOUND_HANDLER(Negate, NegateImpl, Bind("example.negate").Arg<F32>().Ctx().Ret<F32>());

}  // namespace

FARCALL_PLUGIN("example_cuda",
               FARCALL_HANDLER_DEF("example.negate", "cuda",
                                   FARCALL_TRAIT_COMMAND_BUFFER_COMPATIBLE, Negate))
