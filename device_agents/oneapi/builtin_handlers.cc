// The built-in handlers on oneapi: the shared checks
// (builtins/builtin_handlers.h) with OpenCL C kernels (builtin_kernels.cl).
// Tensors are cl_mem objects. crc32c is computed on the host: the bytes are
// read back, which is correct but not fast.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "device_agents/builtins/builtin_handlers.h"
#include "device_agents/builtins/crc32c.h"
#include "device_agents/oneapi/oneapi_backend.h"

namespace farcall::agent::oneapi {
namespace {

using builtins::CopyOp;
using sdk::CallFrame;
using sdk::OkStatus;
using sdk::Status;

Status ToSdk(const absl::Status& s) {
  if (s.ok()) return OkStatus();
  return Status(static_cast<FarcallCode>(s.code()), std::string(s.message()));
}

Status FromCl(cl_int err, const char* what) {
  if (err == CL_SUCCESS) return OkStatus();
  return ToSdk(ClErrorToStatus(err, what));
}

cl_command_queue QueueOf(const CallFrame& call) { return call.stream<cl_command_queue>(); }
cl_mem Mem(const void* p) { return static_cast<cl_mem>(const_cast<void*>(p)); }

// The kernel-name suffix of a storage dtype ("f32", "u16", ...), or null.
const char* Suffix(FarcallDType d) {
  switch (d) {
    case FARCALL_DTYPE_F32:
      return "f32";
    case FARCALL_DTYPE_F64:
      return "f64";
    case FARCALL_DTYPE_F16:
      return "f16";
    case FARCALL_DTYPE_BF16:
      return "bf16";
    case FARCALL_DTYPE_F8E5M2:
      return "f8e5m2";
    case FARCALL_DTYPE_F8E4M3FN:
      return "f8e4m3fn";
    case FARCALL_DTYPE_F8E4M3B11FNUZ:
      return "f8e4m3b11fnuz";
    case FARCALL_DTYPE_F8E5M2FNUZ:
      return "f8e5m2fnuz";
    case FARCALL_DTYPE_F8E4M3FNUZ:
      return "f8e4m3fnuz";
    case FARCALL_DTYPE_S8:
    case FARCALL_DTYPE_U8:
      return "u8";
    case FARCALL_DTYPE_S16:
    case FARCALL_DTYPE_U16:
      return "u16";
    case FARCALL_DTYPE_S32:
    case FARCALL_DTYPE_U32:
      return "u32";
    case FARCALL_DTYPE_S64:
    case FARCALL_DTYPE_U64:
      return "u64";
    default:
      return nullptr;
  }
}

// One kernel launch: looks the kernel up in the device's program, sets the
// args in order, enqueues it on the call's queue.
class Launch {
 public:
  Launch(CallFrame& call, const char* op, FarcallDType d) : queue_(QueueOf(call)) {
    const char* suffix = Suffix(d);
    bool fp64 = false;
    absl::StatusOr<cl_program> program = BuiltinProgramFor(queue_, &fp64);
    if (!program.ok()) {
      status_ = ToSdk(program.status());
      return;
    }
    if (suffix == nullptr || (d == FARCALL_DTYPE_F64 && !fp64)) {
      status_ = sdk::Unimplemented(std::string(op) + ": dtype " + builtins::Name(d) +
                                   " has no kernel on this OpenCL device" +
                                   (d == FARCALL_DTYPE_F64 ? " (it lacks cl_khr_fp64)" : ""));
      return;
    }
    const std::string name = std::string(op) + "_" + suffix;
    cl_int err = CL_SUCCESS;
    kernel_ = clCreateKernel(*program, name.c_str(), &err);
    status_ = FromCl(err, "clCreateKernel");
  }
  ~Launch() {
    if (kernel_ != nullptr) clReleaseKernel(kernel_);
  }
  template <typename T>
  Launch& Arg(const T& value) {
    if (status_.ok()) {
      status_ = FromCl(clSetKernelArg(kernel_, index_, sizeof(T), &value), "clSetKernelArg");
    }
    ++index_;
    return *this;
  }
  // `n` items over a grid-stride loop.
  Status Run(int64_t n) {
    if (!status_.ok()) return status_;
    size_t global =
        std::min<size_t>((static_cast<size_t>(n) + kGroup - 1) / kGroup * kGroup, size_t{1} << 20);
    return FromCl(
        clEnqueueNDRangeKernel(queue_, kernel_, 1, nullptr, &global, nullptr, 0, nullptr, nullptr),
        "clEnqueueNDRangeKernel");
  }
  // `groups` work-groups of kGroup items (the sums' stages).
  Status RunGroups(size_t groups) {
    if (!status_.ok()) return status_;
    size_t global = groups * kGroup;
    const size_t local = kGroup;
    return FromCl(
        clEnqueueNDRangeKernel(queue_, kernel_, 1, nullptr, &global, &local, 0, nullptr, nullptr),
        "clEnqueueNDRangeKernel");
  }
  static constexpr size_t kGroup = 256;      // SUM_WG in builtin_kernels.cl
  static constexpr size_t kSumGroups = 256;  // SUM_GROUPS there

 private:
  cl_command_queue queue_;
  cl_kernel kernel_ = nullptr;
  cl_uint index_ = 0;
  Status status_;
};

template <typename C>
Status ScaleOrAxpy(CallFrame& call, const char* op, FarcallDType d, const void* x, const void* y,
                   void* out, int64_t n, double alpha) {
  Launch k(call, op, d);
  k.Arg(Mem(x));
  if (y != nullptr) k.Arg(Mem(y));
  return k.Arg(Mem(out)).Arg(static_cast<cl_ulong>(n)).Arg(static_cast<C>(alpha)).Run(n);
}

struct OpenClKernels {
  static Status Copy(CallFrame& call, const std::vector<CopyOp>& ops) {
    cl_command_queue q = QueueOf(call);
    cl_context ctx = nullptr;
    Status status =
        FromCl(clGetCommandQueueInfo(q, CL_QUEUE_CONTEXT, sizeof(ctx), &ctx, nullptr), "copy");
    std::vector<cl_mem> temps;
    std::vector<cl_mem> sources;
    for (const CopyOp& op : ops) {
      if (!status.ok()) break;
      cl_mem src = Mem(op.src);
      for (const CopyOp& other : ops) {
        if (&other == &op || other.dst != op.src) continue;
        cl_int err = CL_SUCCESS;
        cl_mem t = clCreateBuffer(ctx, CL_MEM_READ_WRITE, op.bytes, nullptr, &err);
        status = FromCl(err, "copy: snapshot");
        if (status.ok()) {
          temps.push_back(t);
          status = FromCl(clEnqueueCopyBuffer(q, src, t, 0, 0, op.bytes, 0, nullptr, nullptr),
                          "copy: snapshot");
          src = t;
        }
        break;
      }
      sources.push_back(src);
    }
    for (size_t i = 0; status.ok() && i < ops.size(); ++i) {
      status = FromCl(clEnqueueCopyBuffer(q, sources[i], Mem(ops[i].dst), 0, 0, ops[i].bytes, 0,
                                          nullptr, nullptr),
                      "copy");
    }
    // Buffers are released only once the queue no longer uses them.
    for (cl_mem t : temps) clReleaseMemObject(t);
    return status;
  }
  static Status Scale(CallFrame& call, FarcallDType d, const void* x, void* out, int64_t n,
                      double alpha) {
    if (d == FARCALL_DTYPE_F64)
      return ScaleOrAxpy<double>(call, "scale", d, x, nullptr, out, n, alpha);
    return ScaleOrAxpy<float>(call, "scale", d, x, nullptr, out, n, alpha);
  }
  static Status Axpy(CallFrame& call, FarcallDType d, const void* x, const void* y, void* out,
                     int64_t n, double alpha) {
    if (d == FARCALL_DTYPE_F64) return ScaleOrAxpy<double>(call, "axpy", d, x, y, out, n, alpha);
    return ScaleOrAxpy<float>(call, "axpy", d, x, y, out, n, alpha);
  }
  static Status Add(CallFrame& call, FarcallDType d, const void* a, const void* b, void* out,
                    int64_t n) {
    Launch k(call, "add", d);
    return k.Arg(Mem(a)).Arg(Mem(b)).Arg(Mem(out)).Arg(static_cast<cl_ulong>(n)).Run(n);
  }
  // Two stages (builtin_kernels.cl): the work-groups of the first are
  // picked from the element count alone, so the order of the additions is.
  static Status Sum(CallFrame& call, FarcallDType d, const void* x, int64_t n, int64_t lanes,
                    void* out) {
    const auto count = static_cast<size_t>(n / lanes);
    const size_t groups =
        std::clamp<size_t>((count + Launch::kGroup - 1) / Launch::kGroup, 1, Launch::kSumGroups);
    cl_command_queue q = QueueOf(call);
    cl_context ctx = nullptr;
    Status status =
        FromCl(clGetCommandQueueInfo(q, CL_QUEUE_CONTEXT, sizeof(ctx), &ctx, nullptr), "sum");
    if (!status.ok()) return status;
    cl_int err = CL_SUCCESS;
    // Room for a double (or ulong) per group and lane.
    cl_mem partials =
        clCreateBuffer(ctx, CL_MEM_READ_WRITE, 2 * Launch::kSumGroups * 8, nullptr, &err);
    status = FromCl(err, "sum: partials");
    if (!status.ok()) return status;
    status = Launch(call, "sum_part", d)
                 .Arg(Mem(x))
                 .Arg(static_cast<cl_ulong>(n))
                 .Arg(static_cast<cl_ulong>(lanes))
                 .Arg(partials)
                 .RunGroups(groups);
    if (status.ok()) {
      status = Launch(call, "sum_final", d)
                   .Arg(partials)
                   .Arg(static_cast<cl_uint>(groups))
                   .Arg(static_cast<cl_ulong>(lanes))
                   .Arg(Mem(out))
                   .RunGroups(1);
    }
    // Released once the queue no longer uses it.
    clReleaseMemObject(partials);
    return status;
  }
  static Status Crc32c(CallFrame& call, const void* x, uint64_t bytes, void* out) {
    cl_command_queue q = QueueOf(call);
    std::vector<uint8_t> host(bytes);
    Status s;
    if (bytes > 0) {
      s = FromCl(
          clEnqueueReadBuffer(q, Mem(x), CL_TRUE, 0, bytes, host.data(), 0, nullptr, nullptr),
          "crc32c");
    }
    if (!s.ok()) return s;
    const uint32_t crc = builtins::Crc32c(host.data(), host.size());
    return FromCl(
        clEnqueueWriteBuffer(q, Mem(out), CL_TRUE, 0, sizeof(crc), &crc, 0, nullptr, nullptr),
        "crc32c");
  }
};

constexpr auto kDefs = builtins::BuiltinDefs<OpenClKernels>("oneapi", 0);

}  // namespace

std::span<const FarcallHandlerDef> OneapiBuiltinHandlers() { return kDefs; }

}  // namespace farcall::agent::oneapi
