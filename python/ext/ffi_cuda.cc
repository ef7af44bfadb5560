// The XLA FFI handler for JAX's CUDA backend: the operands are copied from
// the device to host memory on XLA's stream, the call runs over the host
// copies, and the results are copied back into XLA's device buffers (an
// aliased result into its operand's buffer, which XLA made the same).
// Built when the CUDA toolkit and jaxlib's FFI headers are both found.
#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "python/ext/ffi_call.h"
#include "python/ext/host_buffer_pool.h"

namespace nb = nanobind;
namespace ffi = xla::ffi;

namespace farcall::python {
namespace {

absl::Status CudaStatus(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("farcall: ", what, " failed: ", cudaGetErrorString(e)));
}

// Pinned host memory for the calls' tensors (the copies are asynchronous),
// reused across calls: cudaMallocHost and cudaFreeHost for every tensor of
// every call cost more than a small call's copies. At most kMaxCachedPinned
// bytes wait for reuse.
constexpr size_t kMaxCachedPinned = size_t{1} << 30;

HostBufferPool& PinnedPool() {
  static auto* pool = new HostBufferPool(  // never destroyed: calls may run at exit
      [](size_t bytes) -> absl::StatusOr<void*> {
        void* p = nullptr;
        absl::Status s = CudaStatus(cudaMallocHost(&p, bytes), "cudaMallocHost");
        if (!s.ok()) return s;
        return p;
      },
      [](void* p) { cudaFreeHost(p); }, kMaxCachedPinned);
  return *pool;
}

absl::Status RunOnHost(cudaStream_t stream, ffi::RemainingArgs& args, ffi::RemainingRets& rets,
                       const FfiCallAttrs& attrs, std::vector<HostBufferPool::Lease>& memory) {
  std::vector<ffi::AnyBuffer> dev_in, dev_out;
  for (size_t i = 0; i < args.size(); ++i) {
    ffi::ErrorOr<ffi::AnyBuffer> b = args.get<ffi::AnyBuffer>(i);
    if (!b.has_value()) return absl::InternalError(b.error().message());
    dev_in.push_back(*b);
  }
  for (size_t o = 0; o < rets.size(); ++o) {
    ffi::ErrorOr<ffi::Result<ffi::AnyBuffer>> b = rets.get<ffi::AnyBuffer>(o);
    if (!b.has_value()) return absl::InternalError(b.error().message());
    dev_out.push_back(**b);
  }
  std::vector<int64_t> output_of_input;
  absl::Status s = ParseAliases(attrs.aliases, dev_in.size(), dev_out.size(), &output_of_input);
  if (!s.ok()) return s;
  std::vector<int64_t> input_of_output(dev_out.size(), -1);
  for (size_t i = 0; i < dev_in.size(); ++i) {
    if (output_of_input[i] >= 0) input_of_output[output_of_input[i]] = static_cast<int64_t>(i);
  }
  // Device to host, on XLA's stream, after the work that made the operands.
  std::vector<HostTensor> in, out;
  for (ffi::AnyBuffer& b : dev_in) {
    absl::StatusOr<HostBufferPool::Lease> lease = PinnedPool().Take(b.size_bytes());
    if (!lease.ok()) return lease.status();
    memory.push_back(*std::move(lease));
    in.push_back({SpecOf(b), memory.back().data(), b.size_bytes()});
    if (b.size_bytes() > 0) {
      s = CudaStatus(cudaMemcpyAsync(in.back().data, b.untyped_data(), b.size_bytes(),
                                     cudaMemcpyDeviceToHost, stream),
                     "cudaMemcpyAsync (device to host)");
      if (!s.ok()) return s;
    }
  }
  for (size_t o = 0; o < dev_out.size(); ++o) {
    const int64_t i = input_of_output[o];
    if (i >= 0) {
      out.push_back({SpecOf(dev_out[o]), in[i].data, dev_out[o].size_bytes()});
      continue;
    }
    absl::StatusOr<HostBufferPool::Lease> lease = PinnedPool().Take(dev_out[o].size_bytes());
    if (!lease.ok()) return lease.status();
    memory.push_back(*std::move(lease));
    out.push_back({SpecOf(dev_out[o]), memory.back().data(), dev_out[o].size_bytes()});
  }
  if (s = CudaStatus(cudaStreamSynchronize(stream), "cudaStreamSynchronize"); !s.ok()) return s;
  if (s = CallRemote(attrs, in, out, output_of_input); !s.ok()) return s;
  // Host to device, then wait: the pinned memory goes back to the pool on
  // return.
  for (size_t o = 0; o < dev_out.size(); ++o) {
    if (out[o].bytes == 0) continue;
    s = CudaStatus(cudaMemcpyAsync(dev_out[o].untyped_data(), out[o].data, out[o].bytes,
                                   cudaMemcpyHostToDevice, stream),
                   "cudaMemcpyAsync (host to device)");
    if (!s.ok()) return s;
  }
  return CudaStatus(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
}

ffi::Error CudaCall(cudaStream_t stream, ffi::RemainingArgs args, ffi::RemainingRets rets,
                    std::string_view target, std::string_view handler, std::string_view platform,
                    std::string_view aliases, std::string_view attributes, double timeout,
                    bool has_side_effect, bool wait_for_ready, int64_t retries, double busy_poll) {
  FfiCallAttrs attrs{target,  handler,         platform,       aliases, attributes,
                     timeout, has_side_effect, wait_for_ready, retries, busy_poll};
  std::vector<HostBufferPool::Lease> memory;
  absl::Status s = RunOnHost(stream, args, rets, attrs, memory);
  if (!s.ok()) {
    // Copies may still be queued on the pinned memory, which goes back to
    // the pool on return: wait for them (their own errors are the stream's
    // to report).
    cudaStreamSynchronize(stream);
  }
  return ToFfiError(s);
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(FarcallXlaCudaCall, CudaCall,
                              BindCall(ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>()));

void AddCudaFfiHandler(nb::dict& handlers) {
  handlers["CUDA"] =
      nb::capsule(reinterpret_cast<void*>(&FarcallXlaCudaCall), "xla._CUSTOM_CALL_TARGET");
}

}  // namespace farcall::python
