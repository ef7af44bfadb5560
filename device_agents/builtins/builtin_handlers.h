// The built-in handlers, once for every platform: copy, scale, axpy, add,
// sum, crc32c, sleep and fail, with the semantics of ARCHITECTURE.md
// ("Built-in handlers"). Each handler checks its frame here (counts, dtypes,
// specs, attributes) and answers INVALID_ARGUMENT with a message that starts
// with its name, e.g. "axpy: x and y must have the same spec, got float32[4]
// and float32[5]"; then a platform's kernel policy does the arithmetic on
// that platform's memory (host loops on cpu, CUDA/HIP kernels, OpenCL C).
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
// `d` is the storage dtype of the `n` values: a real float dtype, or for add
// and sum also an integer dtype (which wraps). A complex dtype arrives as its
// part dtype with twice the count (alpha is real, so parts are independent);
// Sum then gets lanes = 2 and sums even and odd slots apart.
//
// Written against the plugin SDK, like any plugin: the agent registers
// BuiltinDefs<K>(platform) as it registers a plugin's handlers. Handlers keep
// no state and may run concurrently.
#ifndef FARCALL_DEVICE_AGENTS_BUILTINS_BUILTIN_HANDLERS_H_
#define FARCALL_DEVICE_AGENTS_BUILTINS_BUILTIN_HANDLERS_H_

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "core/dtype.h"
#include "farcall/handler.h"

namespace farcall::agent::builtins {

using sdk::Buffer;
using sdk::CallFrame;
using sdk::InvalidArgument;
using sdk::OkStatus;
using sdk::Status;

// One assignment of a copy: `bytes` from `src` to `dst`.
struct CopyOp {
  void* dst;
  const void* src;
  uint64_t bytes;
};

// ---------------------------------------------------------------------------
// Messages

inline std::string ToStr(std::string_view s) { return std::string(s); }
inline std::string ToStr(const char* s) { return std::string(s); }
inline std::string ToStr(const std::string& s) { return s; }
template <typename T>
requires std::is_integral_v<T>
inline std::string ToStr(T v) { return std::to_string(v); }

template <typename... T>
std::string StrCat(const T&... parts) {
  std::string s;
  ((s += ToStr(parts)), ...);
  return s;
}

inline std::string Plural(size_t n, std::string_view noun) {
  return StrCat(n, " ", noun, n == 1 ? "" : "s");
}

// DTypeName's view type is not pinned down (std or absl string_view); copy
// through data()/size(), which both have.
inline std::string Name(DType d) {
  const auto name = DTypeName(d);
  return std::string(name.data(), name.size());
}

inline std::string DTypeString(int32_t number) {
  std::optional<DType> d = DTypeFromNumber(number);
  if (!d.has_value()) return StrCat("dtype(", number, ")");
  return Name(*d);
}

// "float32[4,8]"; a scalar is "float32[]". The same text as
// core/tensor_spec.h's SpecToString, which the handlers cannot link.
inline std::string SpecString(const Buffer& b) {
  std::string s = DTypeString(b.dtype());
  s += '[';
  for (int64_t i = 0; i < b.rank(); ++i) {
    if (i > 0) s += ',';
    s += std::to_string(b.dim(i));
  }
  s += ']';
  return s;
}

// ---------------------------------------------------------------------------
// Frame checks

inline Status CheckCounts(const CallFrame& call, std::string_view handler, size_t args,
                          size_t results) {
  if (call.num_args() == args && call.num_results() == results) {
    return OkStatus();
  }
  return InvalidArgument(StrCat(handler, ": takes ", Plural(args, "arg"), " and ",
                                Plural(results, "result"), ", got ", Plural(call.num_args(), "arg"),
                                " and ", Plural(call.num_results(), "result")));
}

// The agent builds frames from validated specs, but a handler writes through
// these pointers, so a frame whose sizes disagree with its dims must fail
// here rather than overrun memory.
inline Status CheckBuffer(std::string_view handler, std::string_view what, const Buffer& b,
                          DType* dtype) {
  std::optional<DType> d = DTypeFromNumber(b.dtype());
  if (!d.has_value()) {
    return InvalidArgument(
        StrCat(handler, ": ", what, " has unknown dtype ", static_cast<int32_t>(b.dtype())));
  }
  if (b.rank() < 0 || (b.rank() > 0 && b.dims() == nullptr)) {
    return InvalidArgument(StrCat(handler, ": ", what, " has invalid rank ", b.rank()));
  }
  uint64_t bytes = static_cast<uint64_t>(ItemSize(*d));
  for (int64_t i = 0; i < b.rank(); ++i) {
    if (b.dim(i) < 0 || __builtin_mul_overflow(bytes, static_cast<uint64_t>(b.dim(i)), &bytes)) {
      return InvalidArgument(StrCat(handler, ": ", what, " has invalid dims ", SpecString(b)));
    }
  }
  if (bytes != b.size_bytes()) {
    return InvalidArgument(StrCat(handler, ": ", what, " holds ", b.size_bytes(), " bytes but ",
                                  SpecString(b), " needs ", bytes));
  }
  if (bytes > 0 && b.raw() == nullptr) {
    return InvalidArgument(StrCat(handler, ": ", what, " has no data"));
  }
  *dtype = *d;
  return OkStatus();
}

inline Status CheckSameSpec(std::string_view handler, std::string_view what, const Buffer& want,
                            std::string_view want_name, const Buffer& got) {
  if (got.SameSpec(want)) return OkStatus();
  return InvalidArgument(StrCat(handler, ": ", what, " must have ", want_name, "'s spec ",
                                SpecString(want), ", got ", SpecString(got)));
}

inline std::string_view AttrTypeName(int32_t type) {
  switch (type) {
    case FARCALL_ATTR_I64:
      return "i64";
    case FARCALL_ATTR_F64:
      return "f64";
    case FARCALL_ATTR_BOOL:
      return "bool";
    case FARCALL_ATTR_STR:
      return "str";
    default:
      return "unknown";
  }
}

inline Status AttrError(const CallFrame& call, std::string_view handler, std::string_view name,
                        std::string_view type) {
  const FarcallAttribute* a = call.FindAttr(name);
  if (a == nullptr) {
    return InvalidArgument(StrCat(handler, ": attribute '", name, "' (", type, ") is required"));
  }
  return InvalidArgument(
      StrCat(handler, ": attribute '", name, "' must be ", type, ", got ", AttrTypeName(a->type)));
}

// Numeric attributes: the SDK also accepts an i64 where an f64 is asked for.
inline Status GetF64Attr(const CallFrame& call, std::string_view handler, std::string_view name,
                         double* out) {
  std::optional<double> v = call.GetF64(name);
  if (!v.has_value()) return AttrError(call, handler, name, "f64");
  *out = *v;
  return OkStatus();
}

inline Status GetI64Attr(const CallFrame& call, std::string_view handler, std::string_view name,
                         int64_t* out) {
  std::optional<int64_t> v = call.GetI64(name);
  if (!v.has_value()) return AttrError(call, handler, name, "i64");
  *out = *v;
  return OkStatus();
}

inline Status GetStrAttr(const CallFrame& call, std::string_view handler, std::string_view name,
                         std::string_view* out) {
  std::optional<std::string_view> v = call.GetStr(name);
  if (!v.has_value()) return AttrError(call, handler, name, "str");
  *out = *v;
  return OkStatus();
}

// ---------------------------------------------------------------------------
// Dtypes

inline bool IsFloatOrComplex(DType d) { return IsFloating(d) || IsComplex(d); }

// The dtype of one part of a complex dtype; any other dtype is its own.
inline DType PartDType(DType d) {
  if (d == DType::kC64) return DType::kF32;
  if (d == DType::kC128) return DType::kF64;
  return d;
}
inline int64_t Lanes(DType d) { return IsComplex(d) ? 2 : 1; }

inline Status Unsupported(std::string_view handler, DType d, std::string_view needs) {
  return InvalidArgument(
      StrCat(handler, ": dtype ", Name(d), " is not supported (needs ", needs, ")"));
}

inline constexpr std::string_view kNeedsFloat = "a float or complex dtype";
inline constexpr std::string_view kNeedsNumeric = "an integer, float or complex dtype";

// The checks of a two-arg elementwise handler (axpy, add): both args of one
// spec and a `supported` dtype, and a result of the same spec (named after
// b when `result_like_b`, else after a).
struct Binary {
  Buffer a{nullptr}, b{nullptr}, out{nullptr};
  DType d = DType::kInvalid;
};

inline Status CheckBinary(CallFrame& call, std::string_view handler, std::string_view a_name,
                          std::string_view b_name, bool result_like_b, bool (*supported)(DType),
                          std::string_view needs, Binary* v) {
  Status s = CheckCounts(call, handler, 2, 1);
  if (!s.ok()) return s;
  v->a = call.arg(0);
  v->b = call.arg(1);
  v->out = call.result(0);
  DType bd = DType::kInvalid, rd = DType::kInvalid;
  if (!(s = CheckBuffer(handler, a_name, v->a, &v->d)).ok()) return s;
  if (!(s = CheckBuffer(handler, b_name, v->b, &bd)).ok()) return s;
  if (!(s = CheckBuffer(handler, "result", v->out, &rd)).ok()) return s;
  if (!v->a.SameSpec(v->b)) {
    return InvalidArgument(StrCat(handler, ": ", a_name, " and ", b_name,
                                  " must have the same spec, got ", SpecString(v->a), " and ",
                                  SpecString(v->b)));
  }
  if (!supported(v->d)) return Unsupported(handler, v->d, needs);
  return result_like_b ? CheckSameSpec(handler, "result", v->b, b_name, v->out)
                       : CheckSameSpec(handler, "result", v->a, a_name, v->out);
}

// ---------------------------------------------------------------------------
// copy: results[i] = args[i].

template <class K>
Status Copy(CallFrame& call) {
  const size_t n = call.num_args();
  if (call.num_results() != n) {
    return InvalidArgument(StrCat("copy: takes as many results as args, got ", Plural(n, "arg"),
                                  " and ", Plural(call.num_results(), "result")));
  }
  for (size_t i = 0; i < n; ++i) {
    DType d = DType::kInvalid;
    Status s = CheckBuffer("copy", StrCat("args[", i, "]"), call.arg(i), &d);
    if (!s.ok()) return s;
    s = CheckBuffer("copy", StrCat("results[", i, "]"), call.result(i), &d);
    if (!s.ok()) return s;
    s = CheckSameSpec("copy", StrCat("results[", i, "]"), call.arg(i), StrCat("args[", i, "]"),
                      call.result(i));
    if (!s.ok()) return s;
  }
  // A result aliasing its own arg already holds the value.
  std::vector<CopyOp> ops;
  for (size_t i = 0; i < n; ++i) {
    if (call.result(i).size_bytes() > 0 && call.result(i).raw() != call.arg(i).raw()) {
      ops.push_back({call.result(i).raw(), call.arg(i).raw(), call.result(i).size_bytes()});
    }
  }
  if (ops.empty()) return OkStatus();
  return K::Copy(call, ops);
}

// ---------------------------------------------------------------------------
// scale: alpha * x.

template <class K>
Status Scale(CallFrame& call) {
  Status s = CheckCounts(call, "scale", 1, 1);
  if (!s.ok()) return s;
  const Buffer x = call.arg(0);
  const Buffer out = call.result(0);
  DType d = DType::kInvalid, rd = DType::kInvalid;
  if (!(s = CheckBuffer("scale", "x", x, &d)).ok()) return s;
  if (!(s = CheckBuffer("scale", "result", out, &rd)).ok()) return s;
  if (!IsFloatOrComplex(d)) return Unsupported("scale", d, kNeedsFloat);
  if (!(s = CheckSameSpec("scale", "result", x, "x", out)).ok()) return s;
  double alpha = 0;
  if (!(s = GetF64Attr(call, "scale", "alpha", &alpha)).ok()) return s;
  const int64_t n = x.element_count() * Lanes(d);
  if (n == 0) return OkStatus();
  return K::Scale(call, PartDType(d), x.raw(), out.raw(), n, alpha);
}

// ---------------------------------------------------------------------------
// axpy: alpha * x + y. With {1: 0} `out` is y's memory; each element is
// read before it is written, so in place is fine.

template <class K>
Status Axpy(CallFrame& call) {
  Binary v;
  Status s = CheckBinary(call, "axpy", "x", "y", /*result_like_b=*/true, IsFloatOrComplex,
                         kNeedsFloat, &v);
  if (!s.ok()) return s;
  double alpha = 0;
  if (!(s = GetF64Attr(call, "axpy", "alpha", &alpha)).ok()) return s;
  const int64_t n = v.a.element_count() * Lanes(v.d);
  if (n == 0) return OkStatus();
  return K::Axpy(call, PartDType(v.d), v.a.raw(), v.b.raw(), v.out.raw(), n, alpha);
}

// ---------------------------------------------------------------------------
// add: a + b.

template <class K>
Status Add(CallFrame& call) {
  Binary v;
  Status s =
      CheckBinary(call, "add", "a", "b", /*result_like_b=*/false, IsNumeric, kNeedsNumeric, &v);
  if (!s.ok()) return s;
  const int64_t n = v.a.element_count() * Lanes(v.d);
  if (n == 0) return OkStatus();
  return K::Add(call, PartDType(v.d), v.a.raw(), v.b.raw(), v.out.raw(), n);
}

// ---------------------------------------------------------------------------
// sum: the sum of all elements, as a scalar of x's dtype. Floats accumulate
// in double. The result may alias x only when x is a scalar too.

template <class K>
Status Sum(CallFrame& call) {
  Status s = CheckCounts(call, "sum", 1, 1);
  if (!s.ok()) return s;
  const Buffer x = call.arg(0);
  const Buffer out = call.result(0);
  DType d = DType::kInvalid, rd = DType::kInvalid;
  if (!(s = CheckBuffer("sum", "x", x, &d)).ok()) return s;
  if (!(s = CheckBuffer("sum", "result", out, &rd)).ok()) return s;
  if (!IsNumeric(d)) return Unsupported("sum", d, kNeedsNumeric);
  if (rd != d || out.rank() != 0) {
    return InvalidArgument(StrCat("sum: result must be a scalar of x's dtype (", Name(d),
                                  "[]), got ", SpecString(out)));
  }
  return K::Sum(call, PartDType(d), x.raw(), x.element_count() * Lanes(d), Lanes(d), out.raw());
}

// ---------------------------------------------------------------------------
// crc32c: CRC-32C of x's bytes, as a uint32 scalar.

template <class K>
Status Crc32c(CallFrame& call) {
  Status s = CheckCounts(call, "crc32c", 1, 1);
  if (!s.ok()) return s;
  const Buffer x = call.arg(0);
  const Buffer out = call.result(0);
  DType d = DType::kInvalid, rd = DType::kInvalid;
  if (!(s = CheckBuffer("crc32c", "x", x, &d)).ok()) return s;
  if (!(s = CheckBuffer("crc32c", "result", out, &rd)).ok()) return s;
  if (rd != DType::kU32 || out.rank() != 0) {
    return InvalidArgument(StrCat("crc32c: result must be uint32[], got ", SpecString(out)));
  }
  return K::Crc32c(call, x.raw(), x.size_bytes(), out.raw());
}

// ---------------------------------------------------------------------------
// sleep: waits `ms`, stopping early on cancellation or deadline.

// The longest sleep accepted, in ms (the agent's --max_sleep, set at
// start; one value per process).
inline std::atomic<int64_t>& MaxSleepMs() {
  static std::atomic<int64_t> ms{std::numeric_limits<int64_t>::max()};
  return ms;
}

inline Status Sleep(CallFrame& call) {
  Status s = CheckCounts(call, "sleep", 0, 0);
  if (!s.ok()) return s;
  int64_t ms = 0;
  if (!(s = GetI64Attr(call, "sleep", "ms", &ms)).ok()) return s;
  if (ms < 0) {
    return InvalidArgument(StrCat("sleep: attribute 'ms' must be >= 0, got ", ms));
  }
  if (const int64_t cap = MaxSleepMs().load(); ms > cap) {
    return InvalidArgument(StrCat("sleep: attribute 'ms' is ", ms, ", over this agent's limit of ",
                                  cap, " (--max_sleep)"));
  }
  // Waiting on the call's cancellation, never a plain sleep, is what lets a
  // cancelled or timed-out sleep free its slot at once.
  constexpr int64_t kMaxMs = std::numeric_limits<int64_t>::max() / 1'000'000;
  const auto start = std::chrono::steady_clock::now();
  if (call.WaitCancelled(std::min(ms, kMaxMs) * 1'000'000)) {
    const int64_t waited = std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::chrono::steady_clock::now() - start)
                               .count();
    return sdk::Cancelled(StrCat("sleep: cancelled after ", waited, " ms of ", ms));
  }
  return OkStatus();
}

// ---------------------------------------------------------------------------
// fail: returns Status(code, message); code 0 is OK.

inline Status Fail(CallFrame& call) {
  Status s = CheckCounts(call, "fail", 0, 0);
  if (!s.ok()) return s;
  int64_t code = 0;
  std::string_view message;
  if (!(s = GetI64Attr(call, "fail", "code", &code)).ok()) return s;
  if (!(s = GetStrAttr(call, "fail", "message", &message)).ok()) return s;
  if (code == 0) return OkStatus();
  if (code < 1 || code > 16) {
    return InvalidArgument(StrCat("fail: code ", code, " is not a status code (1..16)"));
  }
  return Status(static_cast<FarcallCode>(code), std::string(message));
}

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
