#include "device_agents/cpu/builtin_handlers.h"

#include <cstdint>
#include <cstring>
#include <vector>

#include "device_agents/builtins/builtin_handlers.h"
#include "device_agents/builtins/crc32c.h"
#include "device_agents/builtins/element_codecs.h"

// Only the SDK, the shared built-in checks, the codecs and crc32c.h here, no
// absl: the built-ins are the reference for what a plugin can do.

namespace farcall::agent::cpu {
namespace {

using builtins::CopyOp;
using sdk::CallFrame;
using sdk::OkStatus;
using sdk::Status;

Status Unreachable(const char* what) {
  // The shared checks admit only the dtypes the kernels handle.
  return sdk::Internal(std::string(what) + ": dtype passed the checks but has no kernel");
}

// The host loops behind the built-ins (see builtins/builtin_handlers.h).
struct CpuKernels {
  static Status Copy(CallFrame&, const std::vector<CopyOp>& ops) {
    // A destination that is another op's source would be overwritten before
    // that op reads it: snapshot such sources first. Plain {i: i} aliasing,
    // the normal case, never gets here and allocates nothing.
    std::vector<std::vector<unsigned char>> snapshots;
    std::vector<const void*> sources;
    for (const CopyOp& op : ops) {
      const void* src = op.src;
      for (const CopyOp& other : ops) {
        if (&other != &op && other.dst == op.src) {
          const auto* p = static_cast<const unsigned char*>(op.src);
          snapshots.emplace_back(p, p + op.bytes);
          src = snapshots.back().data();
          break;
        }
      }
      sources.push_back(src);
    }
    for (size_t i = 0; i < ops.size(); ++i) {
      std::memcpy(ops[i].dst, sources[i], ops[i].bytes);
    }
    return OkStatus();
  }

  static Status Scale(CallFrame&, FarcallDType d, const void* x, void* out, int64_t n,
                      double alpha) {
    const bool ok = builtins::VisitFloatCodec(static_cast<int32_t>(d), [&](auto codec) {
      using K = decltype(codec);
      const auto* in = static_cast<const typename K::T*>(x);
      auto* o = static_cast<typename K::T*>(out);
      const auto a = static_cast<typename K::C>(alpha);
      for (int64_t i = 0; i < n; ++i) o[i] = K::Store(a * K::Load(in[i]));
    });
    return ok ? OkStatus() : Unreachable("scale");
  }

  static Status Axpy(CallFrame&, FarcallDType d, const void* x, const void* y, void* out, int64_t n,
                     double alpha) {
    const bool ok = builtins::VisitFloatCodec(static_cast<int32_t>(d), [&](auto codec) {
      using K = decltype(codec);
      const auto* xs = static_cast<const typename K::T*>(x);
      const auto* ys = static_cast<const typename K::T*>(y);
      auto* o = static_cast<typename K::T*>(out);
      const auto a = static_cast<typename K::C>(alpha);
      for (int64_t i = 0; i < n; ++i) o[i] = K::Store(a * K::Load(xs[i]) + K::Load(ys[i]));
    });
    return ok ? OkStatus() : Unreachable("axpy");
  }

  static Status Add(CallFrame&, FarcallDType d, const void* a, const void* b, void* out,
                    int64_t n) {
    const int32_t dt = static_cast<int32_t>(d);
    const bool ok = builtins::VisitFloatCodec(dt,
                                              [&](auto codec) {
                                                using K = decltype(codec);
                                                using T = typename K::T;
                                                const auto* as = static_cast<const T*>(a);
                                                const auto* bs = static_cast<const T*>(b);
                                                auto* o = static_cast<T*>(out);
                                                for (int64_t i = 0; i < n; ++i) {
                                                  o[i] = K::Store(K::Load(as[i]) + K::Load(bs[i]));
                                                }
                                              }) ||
                    builtins::VisitIntegerAsUnsigned(dt, [&](auto tag) {
                      using U = decltype(tag);
                      const auto* as = static_cast<const U*>(a);
                      const auto* bs = static_cast<const U*>(b);
                      auto* o = static_cast<U*>(out);
                      for (int64_t i = 0; i < n; ++i) o[i] = static_cast<U>(as[i] + bs[i]);
                    });
    return ok ? OkStatus() : Unreachable("add");
  }

  // Floats accumulate in double: 8 partial sums break the dependency chain
  // so the loop pipelines (and, for complex, even/odd slots are the real and
  // imaginary parts). The order of additions is fixed, so results are
  // deterministic. Wide unsigned accumulation, truncated at the end, is the
  // wrapped integer sum.
  static Status Sum(CallFrame&, FarcallDType d, const void* x, int64_t n, int64_t lanes,
                    void* out) {
    const int32_t dt = static_cast<int32_t>(d);
    const bool ok =
        builtins::VisitFloatCodec(dt,
                                  [&](auto codec) {
                                    using K = decltype(codec);
                                    const auto* xs = static_cast<const typename K::T*>(x);
                                    double acc[8] = {};
                                    int64_t i = 0;
                                    for (; i + 8 <= n; i += 8) {
                                      for (int j = 0; j < 8; ++j) {
                                        acc[j] += static_cast<double>(K::Load(xs[i + j]));
                                      }
                                    }
                                    for (int j = 0; i < n; ++i, ++j) {
                                      acc[j] += static_cast<double>(K::Load(xs[i]));
                                    }
                                    double parts[2] = {0, 0};
                                    for (int j = 0; j < 8; ++j) parts[j % lanes] += acc[j];
                                    auto* o = static_cast<typename K::T*>(out);
                                    for (int64_t l = 0; l < lanes; ++l) {
                                      o[l] = K::Store(static_cast<typename K::C>(parts[l]));
                                    }
                                  }) ||
        builtins::VisitIntegerAsUnsigned(dt, [&](auto tag) {
          using U = decltype(tag);
          const auto* xs = static_cast<const U*>(x);
          uint64_t acc = 0;
          for (int64_t i = 0; i < n; ++i) acc += xs[i];
          *static_cast<U*>(out) = static_cast<U>(acc);
        });
    return ok ? OkStatus() : Unreachable("sum");
  }

  static Status Crc32c(CallFrame&, const void* x, uint64_t bytes, void* out) {
    const uint32_t crc = builtins::Crc32c(x, bytes);
    std::memcpy(out, &crc, sizeof(crc));
    return OkStatus();
  }
};

constexpr auto kDefs = builtins::BuiltinDefs<CpuKernels>("cpu", 0);

}  // namespace

std::span<const FarcallHandlerDef> BuiltinHandlers() { return kDefs; }

}  // namespace farcall::agent::cpu
