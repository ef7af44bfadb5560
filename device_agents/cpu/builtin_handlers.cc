#include "device_agents/cpu/builtin_handlers.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "core/dtype.h"
#include "core/float_types.h"
#include "device_agents/cpu/crc32c.h"
#include "farcall/handler.h"

// Only the SDK, the dtype table, float_types.h and crc32c.h here, no absl:
// the built-ins are the reference for what a plugin can do with the SDK.

namespace farcall::agent::cpu {
namespace {

using sdk::Buffer;
using sdk::CallFrame;
using sdk::InvalidArgument;
using sdk::OkStatus;
using sdk::Status;

// ---------------------------------------------------------------------------
// Messages

std::string ToStr(std::string_view s) { return std::string(s); }
std::string ToStr(const char* s) { return std::string(s); }
std::string ToStr(const std::string& s) { return s; }
template <typename T>
  requires std::is_integral_v<T>
std::string ToStr(T v) {
  return std::to_string(v);
}

template <typename... T>
std::string StrCat(const T&... parts) {
  std::string s;
  ((s += ToStr(parts)), ...);
  return s;
}

std::string Plural(size_t n, std::string_view noun) {
  return StrCat(n, " ", noun, n == 1 ? "" : "s");
}

// DTypeName's view type is not pinned down (std or absl string_view); copy
// through data()/size(), which both have.
std::string Name(DType d) {
  const auto name = DTypeName(d);
  return std::string(name.data(), name.size());
}

std::string DTypeString(int32_t number) {
  std::optional<DType> d = DTypeFromNumber(number);
  if (!d.has_value()) return StrCat("dtype(", number, ")");
  return Name(*d);
}

// "float32[4,8]"; a scalar is "float32[]". The same text as
// core/tensor_spec.h's SpecToString, which the handlers cannot link.
std::string SpecString(const Buffer& b) {
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

Status CheckCounts(const CallFrame& call, std::string_view handler,
                   size_t args, size_t results) {
  if (call.num_args() == args && call.num_results() == results) {
    return OkStatus();
  }
  return InvalidArgument(StrCat(handler, ": takes ", Plural(args, "arg"),
                                " and ", Plural(results, "result"), ", got ",
                                Plural(call.num_args(), "arg"), " and ",
                                Plural(call.num_results(), "result")));
}

// The agent builds frames from validated specs, but a handler writes through
// these pointers, so a frame whose sizes disagree with its dims must fail
// here rather than overrun memory.
Status CheckBuffer(std::string_view handler, std::string_view what,
                   const Buffer& b, DType* dtype) {
  std::optional<DType> d = DTypeFromNumber(b.dtype());
  if (!d.has_value()) {
    return InvalidArgument(
        StrCat(handler, ": ", what, " has unknown dtype ",
               static_cast<int32_t>(b.dtype())));
  }
  if (b.rank() < 0 || (b.rank() > 0 && b.dims() == nullptr)) {
    return InvalidArgument(
        StrCat(handler, ": ", what, " has invalid rank ", b.rank()));
  }
  uint64_t bytes = static_cast<uint64_t>(ItemSize(*d));
  for (int64_t i = 0; i < b.rank(); ++i) {
    if (b.dim(i) < 0 ||
        __builtin_mul_overflow(bytes, static_cast<uint64_t>(b.dim(i)),
                               &bytes)) {
      return InvalidArgument(
          StrCat(handler, ": ", what, " has invalid dims ", SpecString(b)));
    }
  }
  if (bytes != b.size_bytes()) {
    return InvalidArgument(StrCat(handler, ": ", what, " holds ",
                                  b.size_bytes(), " bytes but ",
                                  SpecString(b), " needs ", bytes));
  }
  if (bytes > 0 && b.raw() == nullptr) {
    return InvalidArgument(StrCat(handler, ": ", what, " has no data"));
  }
  *dtype = *d;
  return OkStatus();
}

Status CheckSameSpec(std::string_view handler, std::string_view what,
                     const Buffer& want, std::string_view want_name,
                     const Buffer& got) {
  if (got.SameSpec(want)) return OkStatus();
  return InvalidArgument(StrCat(handler, ": ", what, " must have ", want_name,
                                "'s spec ", SpecString(want), ", got ",
                                SpecString(got)));
}

std::string_view AttrTypeName(int32_t type) {
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

Status AttrError(const CallFrame& call, std::string_view handler,
                 std::string_view name, std::string_view type) {
  const FarcallAttribute* a = call.FindAttr(name);
  if (a == nullptr) {
    return InvalidArgument(StrCat(handler, ": attribute '", name, "' (", type,
                                  ") is required"));
  }
  return InvalidArgument(StrCat(handler, ": attribute '", name, "' must be ",
                                type, ", got ", AttrTypeName(a->type)));
}

// Numeric attributes: the SDK also accepts an i64 where an f64 is asked for.
Status GetF64Attr(const CallFrame& call, std::string_view handler,
                  std::string_view name, double* out) {
  std::optional<double> v = call.GetF64(name);
  if (!v.has_value()) return AttrError(call, handler, name, "f64");
  *out = *v;
  return OkStatus();
}

Status GetI64Attr(const CallFrame& call, std::string_view handler,
                  std::string_view name, int64_t* out) {
  std::optional<int64_t> v = call.GetI64(name);
  if (!v.has_value()) return AttrError(call, handler, name, "i64");
  *out = *v;
  return OkStatus();
}

Status GetStrAttr(const CallFrame& call, std::string_view handler,
                  std::string_view name, std::string_view* out) {
  std::optional<std::string_view> v = call.GetStr(name);
  if (!v.has_value()) return AttrError(call, handler, name, "str");
  *out = *v;
  return OkStatus();
}

// ---------------------------------------------------------------------------
// Element codecs: how a float dtype is stored (T) and computed in (C). The
// narrow types compute in float and round once, on store.

struct F32Codec {
  using T = float;
  using C = float;
  static C Load(T v) { return v; }
  static T Store(C v) { return v; }
};
struct F64Codec {
  using T = double;
  using C = double;
  static C Load(T v) { return v; }
  static T Store(C v) { return v; }
};
struct F16Codec {
  using T = uint16_t;
  using C = float;
  static C Load(T v) { return HalfToFloat(v); }
  static T Store(C v) { return FloatToHalf(v); }
};
struct BF16Codec {
  using T = uint16_t;
  using C = float;
  static C Load(T v) { return BF16ToFloat(v); }
  static T Store(C v) { return FloatToBF16(v); }
};
// The dtype is a template argument so that the format switch in
// float_types.h folds away in each instantiation.
template <DType D>
struct F8Codec {
  using T = uint8_t;
  using C = float;
  static C Load(T v) { return F8ToFloat(D, v); }
  static T Store(C v) { return FloatToF8(D, v); }
};

// Calls f(Codec{}, lanes) for a float or complex dtype; a complex number is
// `lanes` = 2 consecutive floats, and since alpha is real every built-in
// treats its parts independently. False for any other dtype.
template <typename F>
bool VisitFloatOrComplex(DType d, F&& f) {
  switch (d) {
    case DType::kF16:
      f(F16Codec{}, 1);
      return true;
    case DType::kBF16:
      f(BF16Codec{}, 1);
      return true;
    case DType::kF32:
      f(F32Codec{}, 1);
      return true;
    case DType::kF64:
      f(F64Codec{}, 1);
      return true;
    case DType::kC64:
      f(F32Codec{}, 2);
      return true;
    case DType::kC128:
      f(F64Codec{}, 2);
      return true;
    case DType::kF8E5M2:
      f(F8Codec<DType::kF8E5M2>{}, 1);
      return true;
    case DType::kF8E4M3FN:
      f(F8Codec<DType::kF8E4M3FN>{}, 1);
      return true;
    case DType::kF8E4M3B11FNUZ:
      f(F8Codec<DType::kF8E4M3B11FNUZ>{}, 1);
      return true;
    case DType::kF8E5M2FNUZ:
      f(F8Codec<DType::kF8E5M2FNUZ>{}, 1);
      return true;
    case DType::kF8E4M3FNUZ:
      f(F8Codec<DType::kF8E4M3FNUZ>{}, 1);
      return true;
    default:
      return false;
  }
}

// Calls f(U{}) with the unsigned type as wide as integer dtype `d`. Signed
// and unsigned addition agree modulo 2^bits, and unsigned arithmetic wraps
// without undefined behaviour. False for any other dtype.
template <typename F>
bool VisitInteger(DType d, F&& f) {
  const DTypeKind kind = KindOf(d);
  if (kind != DTypeKind::kSigned && kind != DTypeKind::kUnsigned) return false;
  switch (ItemSize(d)) {
    case 1:
      f(uint8_t{});
      return true;
    case 2:
      f(uint16_t{});
      return true;
    case 4:
      f(uint32_t{});
      return true;
    case 8:
      f(uint64_t{});
      return true;
    default:
      return false;
  }
}

bool IsFloatOrComplex(DType d) { return IsFloating(d) || IsComplex(d); }

Status Unsupported(std::string_view handler, DType d, std::string_view needs) {
  return InvalidArgument(StrCat(handler, ": dtype ", Name(d),
                                " is not supported (needs ", needs, ")"));
}

constexpr std::string_view kNeedsFloat = "a float or complex dtype";
constexpr std::string_view kNeedsNumeric =
    "an integer, float or complex dtype";

// ---------------------------------------------------------------------------
// copy: results[i] = args[i].

Status Copy(CallFrame& call) {
  const size_t n = call.num_args();
  if (call.num_results() != n) {
    return InvalidArgument(StrCat("copy: takes as many results as args, got ",
                                  Plural(n, "arg"), " and ",
                                  Plural(call.num_results(), "result")));
  }
  for (size_t i = 0; i < n; ++i) {
    DType d = DType::kInvalid;
    Status s = CheckBuffer("copy", StrCat("args[", i, "]"), call.arg(i), &d);
    if (!s.ok()) return s;
    s = CheckBuffer("copy", StrCat("results[", i, "]"), call.result(i), &d);
    if (!s.ok()) return s;
    s = CheckSameSpec("copy", StrCat("results[", i, "]"), call.arg(i),
                      StrCat("args[", i, "]"), call.result(i));
    if (!s.ok()) return s;
  }
  // A result aliasing its own arg already holds the value. A result
  // aliasing another arg overwrites that arg, which some other result may
  // still need to read: snapshot such sources before writing anything.
  // Plain {i: i} aliasing, the normal case, allocates nothing.
  auto needs_write = [&](size_t i) {
    return call.result(i).size_bytes() > 0 &&
           call.result(i).raw() != call.arg(i).raw();
  };
  std::vector<std::vector<unsigned char>> snapshots;
  std::vector<const void*> sources(n);
  for (size_t i = 0; i < n; ++i) {
    sources[i] = call.arg(i).raw();
    if (!needs_write(i)) continue;
    for (size_t k = 0; k < n; ++k) {
      if (k != i && needs_write(k) &&
          call.result(k).raw() == call.arg(i).raw()) {
        const auto* p = static_cast<const unsigned char*>(call.arg(i).raw());
        snapshots.emplace_back(p, p + call.arg(i).size_bytes());
        sources[i] = snapshots.back().data();
        break;
      }
    }
  }
  for (size_t i = 0; i < n; ++i) {
    if (needs_write(i)) {
      std::memcpy(call.result(i).raw(), sources[i],
                  call.result(i).size_bytes());
    }
  }
  return OkStatus();
}

// ---------------------------------------------------------------------------
// scale: alpha * x.

template <typename K>
void ScaleKernel(const typename K::T* x, typename K::T* out, int64_t n,
                 typename K::C alpha) {
  for (int64_t i = 0; i < n; ++i) out[i] = K::Store(alpha * K::Load(x[i]));
}

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

  VisitFloatOrComplex(d, [&](auto codec, int64_t lanes) {
    using K = decltype(codec);
    using T = typename K::T;
    ScaleKernel<K>(x.data<const T>(), out.data<T>(),
                   x.element_count() * lanes,
                   static_cast<typename K::C>(alpha));
  });
  return OkStatus();
}

// ---------------------------------------------------------------------------
// axpy: alpha * x + y. With {1: 0} `out` is y's memory; each element is
// read before it is written, so in place is fine.

template <typename K>
void AxpyKernel(const typename K::T* x, const typename K::T* y,
                typename K::T* out, int64_t n, typename K::C alpha) {
  for (int64_t i = 0; i < n; ++i) {
    out[i] = K::Store(alpha * K::Load(x[i]) + K::Load(y[i]));
  }
}

Status Axpy(CallFrame& call) {
  Status s = CheckCounts(call, "axpy", 2, 1);
  if (!s.ok()) return s;
  const Buffer x = call.arg(0);
  const Buffer y = call.arg(1);
  const Buffer out = call.result(0);
  DType d = DType::kInvalid, yd = DType::kInvalid, rd = DType::kInvalid;
  if (!(s = CheckBuffer("axpy", "x", x, &d)).ok()) return s;
  if (!(s = CheckBuffer("axpy", "y", y, &yd)).ok()) return s;
  if (!(s = CheckBuffer("axpy", "result", out, &rd)).ok()) return s;
  if (!x.SameSpec(y)) {
    return InvalidArgument(StrCat("axpy: x and y must have the same spec, got ",
                                  SpecString(x), " and ", SpecString(y)));
  }
  if (!IsFloatOrComplex(d)) return Unsupported("axpy", d, kNeedsFloat);
  if (!(s = CheckSameSpec("axpy", "result", y, "y", out)).ok()) return s;
  double alpha = 0;
  if (!(s = GetF64Attr(call, "axpy", "alpha", &alpha)).ok()) return s;

  VisitFloatOrComplex(d, [&](auto codec, int64_t lanes) {
    using K = decltype(codec);
    using T = typename K::T;
    AxpyKernel<K>(x.data<const T>(), y.data<const T>(), out.data<T>(),
                  x.element_count() * lanes,
                  static_cast<typename K::C>(alpha));
  });
  return OkStatus();
}

// ---------------------------------------------------------------------------
// add: a + b.

template <typename K>
void AddFloatKernel(const typename K::T* a, const typename K::T* b,
                    typename K::T* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    out[i] = K::Store(K::Load(a[i]) + K::Load(b[i]));
  }
}

template <typename U>
void AddIntKernel(const U* a, const U* b, U* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<U>(a[i] + b[i]);
}

Status Add(CallFrame& call) {
  Status s = CheckCounts(call, "add", 2, 1);
  if (!s.ok()) return s;
  const Buffer a = call.arg(0);
  const Buffer b = call.arg(1);
  const Buffer out = call.result(0);
  DType d = DType::kInvalid, bd = DType::kInvalid, rd = DType::kInvalid;
  if (!(s = CheckBuffer("add", "a", a, &d)).ok()) return s;
  if (!(s = CheckBuffer("add", "b", b, &bd)).ok()) return s;
  if (!(s = CheckBuffer("add", "result", out, &rd)).ok()) return s;
  if (!a.SameSpec(b)) {
    return InvalidArgument(StrCat("add: a and b must have the same spec, got ",
                                  SpecString(a), " and ", SpecString(b)));
  }
  if (!IsNumeric(d)) return Unsupported("add", d, kNeedsNumeric);
  if (!(s = CheckSameSpec("add", "result", a, "a", out)).ok()) return s;

  const int64_t n = a.element_count();
  const bool handled =
      VisitFloatOrComplex(d,
                          [&](auto codec, int64_t lanes) {
                            using K = decltype(codec);
                            using T = typename K::T;
                            AddFloatKernel<K>(a.data<const T>(),
                                              b.data<const T>(), out.data<T>(),
                                              n * lanes);
                          }) ||
      VisitInteger(d, [&](auto tag) {
        using U = decltype(tag);
        AddIntKernel<U>(a.data<const U>(), b.data<const U>(), out.data<U>(),
                        n);
      });
  if (!handled) return Unsupported("add", d, kNeedsNumeric);
  return OkStatus();
}

// ---------------------------------------------------------------------------
// sum: the sum of all elements, as a scalar of x's dtype.

// Floats accumulate in double: 8 partial sums break the dependency chain so
// the loop pipelines (and, for complex, even/odd slots are the real and
// imaginary parts). The order of additions is fixed, so results are
// deterministic.
template <typename K>
void SumFloatKernel(const typename K::T* x, int64_t n, int64_t lanes,
                    double* parts /* [lanes] */) {
  double acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) {
      acc[j] += static_cast<double>(K::Load(x[i + j]));
    }
  }
  for (int j = 0; i < n; ++i, ++j) acc[j] += static_cast<double>(K::Load(x[i]));
  for (int64_t l = 0; l < lanes; ++l) parts[l] = 0;
  for (int j = 0; j < 8; ++j) parts[j % lanes] += acc[j];
}

// Wide unsigned accumulation, truncated at the end, is the wrapped sum.
template <typename U>
U SumIntKernel(const U* x, int64_t n) {
  uint64_t acc = 0;
  for (int64_t i = 0; i < n; ++i) acc += x[i];
  return static_cast<U>(acc);
}

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
    return InvalidArgument(StrCat("sum: result must be a scalar of x's dtype (",
                                  Name(d), "[]), got ", SpecString(out)));
  }

  const int64_t n = x.element_count();
  // The result may alias x only when x is a scalar too; every read below
  // finishes before the single write.
  const bool handled =
      VisitFloatOrComplex(d,
                          [&](auto codec, int64_t lanes) {
                            using K = decltype(codec);
                            using T = typename K::T;
                            using C = typename K::C;
                            double parts[2];
                            SumFloatKernel<K>(x.data<const T>(), n * lanes,
                                              lanes, parts);
                            T* o = out.data<T>();
                            for (int64_t l = 0; l < lanes; ++l) {
                              o[l] = K::Store(static_cast<C>(parts[l]));
                            }
                          }) ||
      VisitInteger(d, [&](auto tag) {
        using U = decltype(tag);
        *out.data<U>() = SumIntKernel<U>(x.data<const U>(), n);
      });
  if (!handled) return Unsupported("sum", d, kNeedsNumeric);
  return OkStatus();
}

// ---------------------------------------------------------------------------
// crc32c: CRC-32C of x's bytes, as a uint32 scalar.

Status Crc32cHandler(CallFrame& call) {
  Status s = CheckCounts(call, "crc32c", 1, 1);
  if (!s.ok()) return s;
  const Buffer x = call.arg(0);
  const Buffer out = call.result(0);
  DType d = DType::kInvalid, rd = DType::kInvalid;
  if (!(s = CheckBuffer("crc32c", "x", x, &d)).ok()) return s;
  if (!(s = CheckBuffer("crc32c", "result", out, &rd)).ok()) return s;
  if (rd != DType::kU32 || out.rank() != 0) {
    return InvalidArgument(
        StrCat("crc32c: result must be uint32[], got ", SpecString(out)));
  }
  const uint32_t crc = Crc32c(x.raw(), x.size_bytes());
  std::memcpy(out.raw(), &crc, sizeof(crc));
  return OkStatus();
}

// ---------------------------------------------------------------------------
// sleep: waits `ms`, stopping early on cancellation or deadline.

Status Sleep(CallFrame& call) {
  Status s = CheckCounts(call, "sleep", 0, 0);
  if (!s.ok()) return s;
  int64_t ms = 0;
  if (!(s = GetI64Attr(call, "sleep", "ms", &ms)).ok()) return s;
  if (ms < 0) {
    return InvalidArgument(
        StrCat("sleep: attribute 'ms' must be >= 0, got ", ms));
  }
  // Waiting on the call's cancellation, never a plain sleep, is what lets a
  // cancelled or timed-out sleep free its slot at once.
  constexpr int64_t kMaxMs = std::numeric_limits<int64_t>::max() / 1'000'000;
  const auto start = std::chrono::steady_clock::now();
  if (call.WaitCancelled(std::min(ms, kMaxMs) * 1'000'000)) {
    const int64_t waited =
        std::chrono::duration_cast<std::chrono::milliseconds>(
            std::chrono::steady_clock::now() - start)
            .count();
    return sdk::Cancelled(
        StrCat("sleep: cancelled after ", waited, " ms of ", ms));
  }
  return OkStatus();
}

// ---------------------------------------------------------------------------
// fail: returns Status(code, message); code 0 is OK.

Status Fail(CallFrame& call) {
  Status s = CheckCounts(call, "fail", 0, 0);
  if (!s.ok()) return s;
  int64_t code = 0;
  std::string_view message;
  if (!(s = GetI64Attr(call, "fail", "code", &code)).ok()) return s;
  if (!(s = GetStrAttr(call, "fail", "message", &message)).ok()) return s;
  if (code == 0) return OkStatus();
  if (code < 1 || code > 16) {
    return InvalidArgument(
        StrCat("fail: code ", code, " is not a status code (1..16)"));
  }
  return Status(static_cast<FarcallCode>(code), std::string(message));
}

constexpr FarcallHandlerDef kDefs[] = {
    FARCALL_HANDLER_DEF("copy", "cpu", 0, Copy),
    FARCALL_HANDLER_DEF("scale", "cpu", 0, Scale),
    FARCALL_HANDLER_DEF("axpy", "cpu", 0, Axpy),
    FARCALL_HANDLER_DEF("add", "cpu", 0, Add),
    FARCALL_HANDLER_DEF("sum", "cpu", 0, Sum),
    FARCALL_HANDLER_DEF("crc32c", "cpu", 0, Crc32cHandler),
    FARCALL_HANDLER_DEF("sleep", "cpu", 0, Sleep),
    FARCALL_HANDLER_DEF("fail", "cpu", 0, Fail),
};

}  // namespace

std::span<const FarcallHandlerDef> BuiltinHandlers() { return kDefs; }

}  // namespace farcall::agent::cpu
