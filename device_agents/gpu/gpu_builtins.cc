// The built-in handlers on CUDA and ROCm: the shared checks
// (builtins/builtin_handlers.h) with device kernels (gpu_kernels.inc).
// crc32c is computed on the host: the bytes are copied back, which is
// correct but not fast, and why crc32c is not command_buffer_compatible.
#include <cstdint>
#include <string>
#include <vector>

#include "device_agents/builtins/builtin_handlers.h"
#include "device_agents/builtins/crc32c.h"
#include "device_agents/gpu/gpu_api.h"
#include "device_agents/gpu/gpu_backend.h"
#include "device_agents/gpu/gpu_kernels.h"

namespace farcall::agent::FARCALL_GPU_NS {
namespace {

using builtins::CopyOp;
using sdk::CallFrame;
using sdk::OkStatus;
using sdk::Status;

Status FromError(api::Error e, const char* what) {
  if (e == api::kSuccess) return OkStatus();
  const absl::Status s = api::ToStatus(e, what);
  return Status(static_cast<FarcallCode>(s.code()), std::string(s.message()));
}

Status FromLaunch(int e, const char* what) { return FromError(static_cast<api::Error>(e), what); }

api::StreamT StreamOf(const CallFrame& call) { return call.stream<api::StreamT>(); }

struct GpuKernels {
  static Status Copy(CallFrame& call, const std::vector<CopyOp>& ops) {
    api::StreamT s = StreamOf(call);
    // Sources that another op overwrites are snapshotted first, in device
    // memory freed once the copies are done (only for crossed aliases).
    std::vector<void*> temps;
    std::vector<const void*> sources;
    Status status;
    for (const CopyOp& op : ops) {
      const void* src = op.src;
      for (const CopyOp& other : ops) {
        if (&other == &op || other.dst != op.src) continue;
        void* t = nullptr;
        status = FromError(api::Malloc(&t, op.bytes), "copy: snapshot");
        if (status.ok()) {
          temps.push_back(t);
          status = FromError(api::CopyD2D(t, op.src, op.bytes, s), "copy: snapshot");
          src = t;
        }
        break;
      }
      if (!status.ok()) break;
      sources.push_back(src);
    }
    for (size_t i = 0; status.ok() && i < ops.size(); ++i) {
      status = FromError(api::CopyD2D(ops[i].dst, sources[i], ops[i].bytes, s), "copy");
    }
    if (!temps.empty()) {
      const api::Error synced = api::StreamSynchronize(s);
      if (status.ok()) status = FromError(synced, "copy");
      for (void* t : temps) (void)api::Free(t);
    }
    return status;
  }

  static Status Scale(CallFrame& call, FarcallDType d, const void* x, void* out, int64_t n,
                      double alpha) {
    return FromLaunch(
        kernels::LaunchScale(static_cast<int32_t>(d), x, out, n, alpha, StreamOf(call)),
        "scale kernel");
  }
  static Status Axpy(CallFrame& call, FarcallDType d, const void* x, const void* y, void* out,
                     int64_t n, double alpha) {
    return FromLaunch(
        kernels::LaunchAxpy(static_cast<int32_t>(d), x, y, out, n, alpha, StreamOf(call)),
        "axpy kernel");
  }
  static Status Add(CallFrame& call, FarcallDType d, const void* a, const void* b, void* out,
                    int64_t n) {
    return FromLaunch(kernels::LaunchAdd(static_cast<int32_t>(d), a, b, out, n, StreamOf(call)),
                      "add kernel");
  }
  static Status Sum(CallFrame& call, FarcallDType d, const void* x, int64_t n, int64_t lanes,
                    void* out) {
    return FromLaunch(kernels::LaunchSum(static_cast<int32_t>(d), x, n, lanes, out, StreamOf(call)),
                      "sum kernel");
  }
  static Status Crc32c(CallFrame& call, const void* x, uint64_t bytes, void* out) {
    api::StreamT s = StreamOf(call);
    std::vector<uint8_t> host(bytes);
    Status status = FromError(api::CopyD2H(host.data(), x, bytes, s), "crc32c");
    if (status.ok()) status = FromError(api::StreamSynchronize(s), "crc32c");
    if (!status.ok()) return status;
    const uint32_t crc = builtins::Crc32c(host.data(), host.size());
    status = FromError(api::CopyH2D(out, &crc, sizeof(crc), s), "crc32c");
    // `crc` lives on this frame: wait for the copy before returning.
    if (status.ok()) status = FromError(api::StreamSynchronize(s), "crc32c");
    return status;
  }
};

constexpr auto kDefs =
    builtins::BuiltinDefs<GpuKernels>(api::kName, FARCALL_TRAIT_COMMAND_BUFFER_COMPATIBLE);

}  // namespace

std::span<const FarcallHandlerDef> GpuBuiltinHandlers() { return kDefs; }

}  // namespace farcall::agent::FARCALL_GPU_NS
