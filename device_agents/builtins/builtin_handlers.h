// The built-in handlers, once for every platform: copy, scale, axpy, add,
// sum, crc32c, sleep and fail, with the semantics of docs/architecture.md
// ("Built-in handlers"). They are written on the public handler SDK alone
// (farcall/handler.h), as a plugin would be: every one but copy, which takes
// any number of args, declares a binding (sdk::Bind), which checks the
// counts and the attributes; the bodies check what a binding cannot say
// (which dtypes, which specs agree) and answer INVALID_ARGUMENT with a
// message that starts with the handler's name, e.g. "axpy: x and y must have
// the same spec, got float32[4] and float32[5]". Then a platform's kernel
// policy does the arithmetic on that platform's memory (host loops on cpu,
// CUDA/HIP kernels, OpenCL C).
//
// A kernel policy K is a struct of static functions, all returning
// sdk::Status and taking the call first (for its stream):
//   Copy(call, ops)            parallel assignment: as if every source were
//                              read before any destination is written;
//   Scale(call, d, x, out, n, alpha)
//   Axpy(call, d, x, y, out, n, alpha)
//   Add(call, d, a, b, out, n)
//   Sum(call, d, x, n, lanes, out)
//   Crc32c(call, x, bytes, out)
// `d` (a FarcallDType) is the storage dtype of the `n` values: a real float
// dtype, or for add and sum also an integer dtype (which wraps). A complex
// dtype arrives as its part dtype with twice the count (alpha is real, so
// parts are independent); Sum then gets lanes = 2 and sums even and odd
// slots apart.
//
// The agent registers BuiltinDefs<K>(platform) as it registers a plugin's
// handlers. Handlers keep no state and may run concurrently.
#ifndef FARCALL_DEVICE_AGENTS_BUILTINS_BUILTIN_HANDLERS_H_
#define FARCALL_DEVICE_AGENTS_BUILTINS_BUILTIN_HANDLERS_H_

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "farcall/handler.h"

namespace farcall::agent::builtins {

using sdk::Buffer;
using sdk::CallFrame;
using sdk::InvalidArgument;
using sdk::OkStatus;
using sdk::Status;
using sdk::Tensor;

// One assignment of a copy: `bytes` from `src` to `dst`.
struct CopyOp {
  void* dst;
  const void* src;
  uint64_t bytes;
};

// ---------------------------------------------------------------------------
// Messages

inline std::string Plural(size_t n, std::string_view noun) {
  return std::to_string(n) + " " + std::string(noun) + (n == 1 ? "" : "s");
}

inline std::string Name(int32_t d) {
  if (!sdk::IsKnownDType(d)) return "dtype(" + std::to_string(d) + ")";
  return std::string(sdk::DTypeName(d));
}

// "float32[4,8]"; a scalar is "float32[]", as the client's specs read.
inline std::string SpecString(const FarcallBuffer& b) {
  std::string s = Name(b.dtype) + '[';
  for (int64_t i = 0; i < b.rank && b.dims != nullptr; ++i) {
    if (i > 0) s += ',';
    s += std::to_string(b.dims[i]);
  }
  return s + ']';
}

inline bool SameSpec(const FarcallBuffer& a, const FarcallBuffer& b) {
  return a.dtype == b.dtype && a.rank == b.rank &&
         std::equal(a.dims, a.dims + a.rank, b.dims, b.dims + b.rank);
}

// ---------------------------------------------------------------------------
// Frame checks

// The agent builds frames from validated specs, but a handler writes through
// these pointers, so a frame whose sizes disagree with its dims must fail
// here rather than overrun memory.
inline Status CheckBuffer(std::string_view handler, const std::string& what,
                          const FarcallBuffer& b) {
  auto refuse = [&](const std::string& why) {
    return InvalidArgument(std::string(handler) + ": " + what + " " + why);
  };
  if (!sdk::IsKnownDType(b.dtype)) return refuse("has unknown dtype " + std::to_string(b.dtype));
  if (b.rank < 0 || (b.rank > 0 && b.dims == nullptr)) {
    return refuse("has invalid rank " + std::to_string(b.rank));
  }
  uint64_t bytes = static_cast<uint64_t>(sdk::ItemSize(b.dtype));
  for (int64_t i = 0; i < b.rank; ++i) {
    if (b.dims[i] < 0 || __builtin_mul_overflow(bytes, static_cast<uint64_t>(b.dims[i]), &bytes)) {
      return refuse("has invalid dims " + SpecString(b));
    }
  }
  if (bytes != b.size_bytes) {
    return refuse("holds " + std::to_string(b.size_bytes) + " bytes but " + SpecString(b) +
                  " needs " + std::to_string(bytes));
  }
  if (bytes > 0 && b.data == nullptr) return refuse("has no data");
  return OkStatus();
}

// CheckBuffer over named tensors: {"x", x}, {"result", out}, ...
template <class... T>
Status CheckBuffers(std::string_view handler, std::pair<const char*, T>... named) {
  Status s;
  ((s.ok() ? (void)(s = CheckBuffer(handler, named.first, *named.second.raw())) : (void)0), ...);
  return s;
}

template <int32_t D, int64_t R, int32_t E, int64_t Q>
Status CheckSameSpec(std::string_view handler, std::string_view what, Tensor<D, R> want,
                     std::string_view want_name, Tensor<E, Q> got) {
  if (SameSpec(*got.raw(), *want.raw())) return OkStatus();
  return InvalidArgument(std::string(handler) + ": " + std::string(what) + " must have " +
                         std::string(want_name) + "'s spec " + SpecString(*want.raw()) + ", got " +
                         SpecString(*got.raw()));
}

inline Status Unsupported(std::string_view handler, int32_t d, std::string_view needs) {
  return InvalidArgument(std::string(handler) + ": dtype " + Name(d) + " is not supported (needs " +
                         std::string(needs) + ")");
}

inline bool IsFloatOrComplex(int32_t d) { return sdk::IsFloating(d) || sdk::IsComplex(d); }
inline constexpr std::string_view kNeedsFloat = "a float or complex dtype";
inline constexpr std::string_view kNeedsNumeric = "an integer, float or complex dtype";

// The checks of a two-arg elementwise handler (axpy, add) beyond its
// binding: both args of one spec and a `supported` dtype, and a result of
// the same spec (named after b when `result_like_b`, else after a).
inline Status CheckBinary(std::string_view handler, const char* a_name, Tensor<> a,
                          const char* b_name, Tensor<> b, Tensor<> out, bool result_like_b,
                          bool (*supported)(int32_t), std::string_view needs) {
  Status s =
      CheckBuffers(handler, std::pair(a_name, a), std::pair(b_name, b), std::pair("result", out));
  if (!s.ok()) return s;
  if (!SameSpec(*a.raw(), *b.raw())) {
    return InvalidArgument(std::string(handler) + ": " + a_name + " and " + b_name +
                           " must have the same spec, got " + SpecString(*a.raw()) + " and " +
                           SpecString(*b.raw()));
  }
  if (!supported(a.dtype())) return Unsupported(handler, a.dtype(), needs);
  return result_like_b ? CheckSameSpec(handler, "result", b, b_name, out)
                       : CheckSameSpec(handler, "result", a, a_name, out);
}

// ---------------------------------------------------------------------------
// copy: results[i] = args[i], for any number of args: no binding, which
// names a fixed count, so the frame is checked by hand.

template <class K>
Status Copy(CallFrame& call) {
  const size_t n = call.num_args();
  if (call.num_results() != n) {
    return InvalidArgument("copy: takes as many results as args, got " + Plural(n, "arg") +
                           " and " + Plural(call.num_results(), "result"));
  }
  const FarcallCallFrame* f = call.raw();
  for (size_t i = 0; i < n; ++i) {
    const std::string arg = "args[" + std::to_string(i) + "]";
    const std::string result = "results[" + std::to_string(i) + "]";
    Status s = CheckBuffer("copy", arg, f->args[i]);
    if (s.ok()) s = CheckBuffer("copy", result, f->results[i]);
    if (!s.ok()) return s;
    if (!SameSpec(f->results[i], f->args[i])) {
      return InvalidArgument("copy: " + result + " must have " + arg + "'s spec " +
                             SpecString(f->args[i]) + ", got " + SpecString(f->results[i]));
    }
  }
  // A result aliasing its own arg already holds the value.
  std::vector<CopyOp> ops;
  for (size_t i = 0; i < n; ++i) {
    if (f->results[i].size_bytes > 0 && f->results[i].data != f->args[i].data) {
      ops.push_back({f->results[i].data, f->args[i].data, f->results[i].size_bytes});
    }
  }
  if (ops.empty()) return OkStatus();
  return K::Copy(call, ops);
}

// ---------------------------------------------------------------------------
// scale: alpha * x.

template <class K>
Status Scale(CallFrame& call) {
  static const auto binding =
      sdk::Bind("scale").Arg<Tensor<>>().Attr<double>("alpha").Ctx().Ret<Tensor<>>();
  return binding.Call(
      [](Tensor<> x, double alpha, CallFrame& call, Tensor<> out) -> Status {
        Status s = CheckBuffers("scale", std::pair("x", x), std::pair("result", out));
        if (!s.ok()) return s;
        if (!IsFloatOrComplex(x.dtype())) return Unsupported("scale", x.dtype(), kNeedsFloat);
        if (!(s = CheckSameSpec("scale", "result", x, "x", out)).ok()) return s;
        const int64_t n = x.element_count() * sdk::Lanes(x.dtype());
        if (n == 0) return OkStatus();
        return K::Scale(call, sdk::PartDType(x.dtype()), x.data(), out.data(), n, alpha);
      },
      call);
}

// ---------------------------------------------------------------------------
// axpy: alpha * x + y. With {1: 0} `out` is y's memory; each element is
// read before it is written, so in place is fine.

template <class K>
Status Axpy(CallFrame& call) {
  static const auto binding =
      sdk::Bind("axpy").Arg<Tensor<>>().Arg<Tensor<>>().Attr<double>("alpha").Ctx().Ret<Tensor<>>();
  return binding.Call(
      [](Tensor<> x, Tensor<> y, double alpha, CallFrame& call, Tensor<> out) -> Status {
        Status s = CheckBinary("axpy", "x", x, "y", y, out, /*result_like_b=*/true,
                               IsFloatOrComplex, kNeedsFloat);
        if (!s.ok()) return s;
        const int64_t n = x.element_count() * sdk::Lanes(x.dtype());
        if (n == 0) return OkStatus();
        return K::Axpy(call, sdk::PartDType(x.dtype()), x.data(), y.data(), out.data(), n, alpha);
      },
      call);
}

// ---------------------------------------------------------------------------
// add: a + b.

template <class K>
Status Add(CallFrame& call) {
  static const auto binding =
      sdk::Bind("add").Arg<Tensor<>>().Arg<Tensor<>>().Ctx().Ret<Tensor<>>();
  return binding.Call(
      [](Tensor<> a, Tensor<> b, CallFrame& call, Tensor<> out) -> Status {
        Status s = CheckBinary("add", "a", a, "b", b, out, /*result_like_b=*/false, sdk::IsNumeric,
                               kNeedsNumeric);
        if (!s.ok()) return s;
        const int64_t n = a.element_count() * sdk::Lanes(a.dtype());
        if (n == 0) return OkStatus();
        return K::Add(call, sdk::PartDType(a.dtype()), a.data(), b.data(), out.data(), n);
      },
      call);
}

// ---------------------------------------------------------------------------
// sum: the sum of all elements, as a scalar of x's dtype. Floats accumulate
// in double. The result may alias x only when x is a scalar too.

template <class K>
Status Sum(CallFrame& call) {
  static const auto binding = sdk::Bind("sum").Arg<Tensor<>>().Ctx().Ret<Tensor<>>();
  return binding.Call(
      [](Tensor<> x, CallFrame& call, Tensor<> out) -> Status {
        Status s = CheckBuffers("sum", std::pair("x", x), std::pair("result", out));
        if (!s.ok()) return s;
        const int32_t d = x.dtype();
        if (!sdk::IsNumeric(d)) return Unsupported("sum", d, kNeedsNumeric);
        if (out.dtype() != d || out.rank() != 0) {
          return InvalidArgument("sum: result must be a scalar of x's dtype (" + Name(d) +
                                 "[]), got " + SpecString(*out.raw()));
        }
        return K::Sum(call, sdk::PartDType(d), x.data(), x.element_count() * sdk::Lanes(d),
                      sdk::Lanes(d), out.data());
      },
      call);
}

// ---------------------------------------------------------------------------
// crc32c: CRC-32C of x's bytes, as a uint32 scalar.

template <class K>
Status Crc32c(CallFrame& call) {
  static const auto binding = sdk::Bind("crc32c").Arg<Tensor<>>().Ctx().Ret<Tensor<>>();
  return binding.Call(
      [](Tensor<> x, CallFrame& call, Tensor<> out) -> Status {
        Status s = CheckBuffers("crc32c", std::pair("x", x), std::pair("result", out));
        if (!s.ok()) return s;
        if (out.dtype() != FARCALL_DTYPE_U32 || out.rank() != 0) {
          return InvalidArgument("crc32c: result must be uint32[], got " + SpecString(*out.raw()));
        }
        return K::Crc32c(call, x.data(), x.size_bytes(), out.data());
      },
      call);
}

// ---------------------------------------------------------------------------
// sleep: waits `ms`, stopping early on cancellation or deadline.

// The longest sleep accepted, in ms (the agent's --max_sleep, set at
// start; one value per process).
inline std::atomic<int64_t>& MaxSleepMs() {
  static std::atomic<int64_t> ms{std::numeric_limits<int64_t>::max()};
  return ms;
}

inline Status SleepImpl(int64_t ms, CallFrame& call) {
  if (ms < 0) {
    return InvalidArgument("sleep: attribute 'ms' must be >= 0, got " + std::to_string(ms));
  }
  if (const int64_t cap = MaxSleepMs().load(); ms > cap) {
    return InvalidArgument("sleep: attribute 'ms' is " + std::to_string(ms) +
                           ", over this agent's limit of " + std::to_string(cap) +
                           " (--max_sleep)");
  }
  // Waiting on the call's cancellation, never a plain sleep, is what lets a
  // cancelled or timed-out sleep free its slot at once.
  constexpr int64_t kMaxMs = std::numeric_limits<int64_t>::max() / 1'000'000;
  const auto start = std::chrono::steady_clock::now();
  if (call.WaitCancelled(std::min(ms, kMaxMs) * 1'000'000)) {
    const int64_t waited = std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::chrono::steady_clock::now() - start)
                               .count();
    return sdk::Cancelled("sleep: cancelled after " + std::to_string(waited) + " ms of " +
                          std::to_string(ms));
  }
  return OkStatus();
}
FARCALL_BOUND_HANDLER(Sleep, SleepImpl, sdk::Bind("sleep").Attr<int64_t>("ms").Ctx());

// ---------------------------------------------------------------------------
// fail: returns Status(code, message); code 0 is OK.

inline Status FailImpl(int64_t code, std::string_view message) {
  if (code == 0) return OkStatus();
  if (code < 1 || code > 16) {
    return InvalidArgument("fail: code " + std::to_string(code) + " is not a status code (1..16)");
  }
  return Status(static_cast<FarcallCode>(code), std::string(message));
}
FARCALL_BOUND_HANDLER(Fail, FailImpl,
                      sdk::Bind("fail").Attr<int64_t>("code").Attr<std::string_view>("message"));

// The built-ins for `platform`, run by kernel policy K. `capturable` are the
// traits of the handlers whose work is all enqueued on the call's stream, so
// that graph capture may record them (0 on platforms without graphs).
template <class K>
constexpr std::array<FarcallHandlerDef, 8> BuiltinDefs(const char* platform, uint32_t capturable) {
  // Every built-in writes all of its results: none needs them zeroed first.
  // All but sleep take time in proportion to their bytes alone.
  constexpr uint32_t kAll = FARCALL_TRAIT_WRITES_ALL_RESULTS;
  constexpr uint32_t kQuick = FARCALL_TRAIT_QUICK;
  return {{
      FARCALL_HANDLER_DEF("copy", platform, kAll | kQuick, Copy<K>),
      FARCALL_HANDLER_DEF("scale", platform, capturable | kAll | kQuick, Scale<K>),
      FARCALL_HANDLER_DEF("axpy", platform, capturable | kAll | kQuick, Axpy<K>),
      FARCALL_HANDLER_DEF("add", platform, capturable | kAll | kQuick, Add<K>),
      FARCALL_HANDLER_DEF("sum", platform, capturable | kAll | kQuick, Sum<K>),
      FARCALL_HANDLER_DEF("crc32c", platform, kAll | kQuick, Crc32c<K>),
      FARCALL_HANDLER_DEF("sleep", platform, kAll, Sleep),
      FARCALL_HANDLER_DEF("fail", platform, kAll | kQuick, Fail),
  }};
}

}  // namespace farcall::agent::builtins

#endif  // FARCALL_DEVICE_AGENTS_BUILTINS_BUILTIN_HANDLERS_H_
