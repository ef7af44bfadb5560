#include "device_agents/cpu/builtin_handlers.h"

#include <chrono>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "core/dtype.h"
#include "core/float_types.h"
#include "device_agents/builtins/crc32c.h"
#include "device_agents/handler_runtime.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace farcall::agent::cpu {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// ---------------------------------------------------------------------------
// Test tensors and frames

// A tensor the test owns; FarcallBuffers point into it.
struct Tensor {
  DType dtype = DType::kInvalid;
  std::vector<int64_t> dims;
  std::vector<unsigned char> bytes;
};

int64_t Count(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

// Scalar parts per element: complex numbers have two.
int Lanes(DType d) { return IsComplex(d) ? 2 : 1; }

Tensor Zeros(DType d, std::vector<int64_t> dims) {
  Tensor t{d, std::move(dims), {}};
  t.bytes.assign(Count(t.dims) * ItemSize(d), 0);
  return t;
}

// Writes part `i` (element i / lanes) of a tensor of dtype `d`. Integers
// take the low bytes of the two's complement of `v`.
void PutPart(DType d, unsigned char* p, size_t i, double v) {
  switch (d) {
    case DType::kF16: {
      const uint16_t h = FloatToHalf(static_cast<float>(v));
      std::memcpy(p + 2 * i, &h, 2);
      return;
    }
    case DType::kBF16: {
      const uint16_t h = FloatToBF16(static_cast<float>(v));
      std::memcpy(p + 2 * i, &h, 2);
      return;
    }
    case DType::kF32:
    case DType::kC64: {
      const float f = static_cast<float>(v);
      std::memcpy(p + 4 * i, &f, 4);
      return;
    }
    case DType::kF64:
    case DType::kC128:
      std::memcpy(p + 8 * i, &v, 8);
      return;
    case DType::kPred:
      p[i] = v != 0;
      return;
    default:
      if (IsFloat8(d)) {
        p[i] = FloatToF8(d, static_cast<float>(v));
        return;
      }
      const uint64_t bits = static_cast<uint64_t>(static_cast<int64_t>(v));
      const int64_t size = ItemSize(d);
      std::memcpy(p + size * i, &bits, size);  // little-endian
  }
}

double GetPart(DType d, const unsigned char* p, size_t i) {
  switch (d) {
    case DType::kF16: {
      uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      return HalfToFloat(h);
    }
    case DType::kBF16: {
      uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      return BF16ToFloat(h);
    }
    case DType::kF32:
    case DType::kC64: {
      float f;
      std::memcpy(&f, p + 4 * i, 4);
      return f;
    }
    case DType::kF64:
    case DType::kC128: {
      double v;
      std::memcpy(&v, p + 8 * i, 8);
      return v;
    }
    case DType::kPred:
      return p[i];
    default: {
      if (IsFloat8(d)) return F8ToFloat(d, p[i]);
      const int64_t size = ItemSize(d);
      uint64_t bits = 0;
      std::memcpy(&bits, p + size * i, size);
      if (KindOf(d) == DTypeKind::kSigned && size < 8 && (bits >> (8 * size - 1)) != 0) {
        bits |= ~uint64_t{0} << (8 * size);  // sign-extend
      }
      return KindOf(d) == DTypeKind::kSigned ? static_cast<double>(static_cast<int64_t>(bits))
                                             : static_cast<double>(bits);
    }
  }
}

// `parts` holds every scalar part: two per complex element, real first.
Tensor Make(DType d, std::vector<int64_t> dims, const std::vector<double>& parts) {
  Tensor t = Zeros(d, std::move(dims));
  EXPECT_EQ(static_cast<int64_t>(parts.size()), Count(t.dims) * Lanes(d));
  for (size_t i = 0; i < parts.size(); ++i) {
    PutPart(d, t.bytes.data(), i, parts[i]);
  }
  return t;
}

std::vector<double> Parts(const Tensor& t) {
  std::vector<double> out(Count(t.dims) * Lanes(t.dtype));
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = GetPart(t.dtype, t.bytes.data(), i);
  }
  return out;
}

// What storing `v` into dtype `d` yields.
double RoundTo(DType d, double v) {
  unsigned char tmp[16];
  PutPart(d, tmp, 0, v);
  return GetPart(d, tmp, 0);
}

Tensor RandomBytes(DType d, std::vector<int64_t> dims, uint32_t seed) {
  Tensor t = Zeros(d, std::move(dims));
  std::mt19937 rng(seed);
  for (unsigned char& b : t.bytes) b = static_cast<unsigned char>(rng());
  return t;
}

FarcallBuffer Buf(Tensor& t, int64_t aliased_arg = -1) {
  FarcallBuffer b{};
  b.struct_size = sizeof(b);
  b.dtype = static_cast<int32_t>(t.dtype);
  b.rank = static_cast<int64_t>(t.dims.size());
  b.dims = t.dims.data();
  b.data = t.bytes.data();
  b.size_bytes = t.bytes.size();
  b.aliased_arg = aliased_arg;
  return b;
}

FarcallAttribute Attr(const char* name) {
  FarcallAttribute a{};
  a.struct_size = sizeof(a);
  a.name = name;
  a.name_size = std::strlen(name);
  return a;
}
FarcallAttribute F64(const char* name, double v) {
  FarcallAttribute a = Attr(name);
  a.type = FARCALL_ATTR_F64;
  a.f64 = v;
  return a;
}
FarcallAttribute I64(const char* name, int64_t v) {
  FarcallAttribute a = Attr(name);
  a.type = FARCALL_ATTR_I64;
  a.i64 = v;
  return a;
}
// `v` must outlive the call; the tests pass literals.
FarcallAttribute Str(const char* name, std::string_view v) {
  FarcallAttribute a = Attr(name);
  a.type = FARCALL_ATTR_STR;
  a.str = v.data();
  a.str_size = v.size();
  return a;
}

FarcallHandlerFn Fn(std::string_view name) {
  for (const FarcallHandlerDef& def : BuiltinHandlers()) {
    if (name == def.name) return def.fn;
  }
  ADD_FAILURE() << "no built-in " << name;
  return nullptr;
}

absl::Status Call(std::string_view name, std::vector<FarcallBuffer> args,
                  std::vector<FarcallBuffer> results, std::vector<FarcallAttribute> attrs = {},
                  const CancellationToken* cancel = nullptr) {
  HandlerInvocation inv;
  inv.args = std::move(args);
  inv.results = std::move(results);
  inv.attrs = std::move(attrs);
  inv.cancel = cancel;
  FarcallHandlerFn fn = Fn(name);
  if (fn == nullptr) return absl::NotFoundError(std::string(name));
  return InvokeHandler(fn, inv);
}

std::string Name(DType d) {
  const auto name = DTypeName(d);
  return std::string(name.data(), name.size());
}

void ExpectInvalid(const absl::Status& s, std::string_view message) {
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(std::string(s.message()), std::string(message));
}

const std::vector<DType> kFloatAndComplex = {
    DType::kF16,           DType::kBF16,       DType::kF32,       DType::kF64,
    DType::kC64,           DType::kC128,       DType::kF8E5M2,    DType::kF8E4M3FN,
    DType::kF8E4M3B11FNUZ, DType::kF8E5M2FNUZ, DType::kF8E4M3FNUZ};

std::vector<DType> NumericDTypes() {
  std::vector<DType> out;
  for (DType d : AllDTypes())
    if (IsNumeric(d)) out.push_back(d);
  return out;
}

std::vector<DType> NotFloatOrComplex() {
  std::vector<DType> out;
  for (DType d : AllDTypes())
    if (!IsFloating(d) && !IsComplex(d)) out.push_back(d);
  return out;
}

// How the narrow float types compute: in float for everything but float64
// and complex128, then one rounding to the dtype.
bool ComputesInDouble(DType d) { return d == DType::kF64 || d == DType::kC128; }

// ---------------------------------------------------------------------------
// The table

TEST(BuiltinHandlersTest, AllDefinedForCpu) {
  std::vector<std::string> names;
  for (const FarcallHandlerDef& def : BuiltinHandlers()) {
    EXPECT_EQ(def.struct_size, sizeof(FarcallHandlerDef));
    EXPECT_STREQ(def.platform, "cpu");
    EXPECT_NE(def.fn, nullptr);
    names.push_back(def.name);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"copy", "scale", "axpy", "add", "sum", "crc32c",
                                             "sleep", "fail"}));
}

// ---------------------------------------------------------------------------
// copy

TEST(CopyTest, EveryDType) {
  for (DType d : AllDTypes()) {
    SCOPED_TRACE(DTypeName(d));
    Tensor a = RandomBytes(d, {3}, 1);
    Tensor b = RandomBytes(d, {2, 2}, 2);
    Tensor ra = Zeros(d, {3});
    Tensor rb = Zeros(d, {2, 2});
    ASSERT_TRUE(Call("copy", {Buf(a), Buf(b)}, {Buf(ra), Buf(rb)}).ok());
    EXPECT_EQ(ra.bytes, a.bytes);
    EXPECT_EQ(rb.bytes, b.bytes);
  }
}

TEST(CopyTest, AliasedResultsKeepTheirInput) {
  for (DType d : AllDTypes()) {
    SCOPED_TRACE(DTypeName(d));
    Tensor a = RandomBytes(d, {5}, 3);
    const std::vector<unsigned char> before = a.bytes;
    ASSERT_TRUE(Call("copy", {Buf(a)}, {Buf(a, /*aliased_arg=*/0)}).ok());
    EXPECT_EQ(a.bytes, before);
  }
}

TEST(CopyTest, MixedAliasing) {
  Tensor a = RandomBytes(DType::kF32, {4}, 4);
  Tensor b = RandomBytes(DType::kS8, {7}, 5);
  Tensor rb = Zeros(DType::kS8, {7});
  const std::vector<unsigned char> a_before = a.bytes;
  ASSERT_TRUE(Call("copy", {Buf(a), Buf(b)}, {Buf(a, 0), Buf(rb)}).ok());
  EXPECT_EQ(a.bytes, a_before);
  EXPECT_EQ(rb.bytes, b.bytes);
}

// {0: 1, 1: 0}: each result is the other arg's memory, so the values swap
// places; writing one must not clobber the other's source.
TEST(CopyTest, CrossAliasingSwaps) {
  Tensor a = RandomBytes(DType::kF64, {3}, 6);
  Tensor b = RandomBytes(DType::kF64, {3}, 7);
  const std::vector<unsigned char> a_before = a.bytes;
  const std::vector<unsigned char> b_before = b.bytes;
  ASSERT_TRUE(Call("copy", {Buf(a), Buf(b)}, {Buf(b, 1), Buf(a, 0)}).ok());
  EXPECT_EQ(b.bytes, a_before);  // results[0] lives in b
  EXPECT_EQ(a.bytes, b_before);  // results[1] lives in a
}

TEST(CopyTest, NothingToCopy) {
  EXPECT_TRUE(Call("copy", {}, {}).ok());
  Tensor e = Zeros(DType::kF32, {0, 3});
  Tensor r = Zeros(DType::kF32, {0, 3});
  EXPECT_TRUE(Call("copy", {Buf(e)}, {Buf(r)}).ok());
}

TEST(CopyTest, Rejects) {
  Tensor a = Zeros(DType::kF32, {4});
  Tensor r5 = Zeros(DType::kF32, {5});
  Tensor ri = Zeros(DType::kS32, {4});
  ExpectInvalid(Call("copy", {Buf(a)}, {}),
                "copy: takes as many results as args, got 1 arg and 0 results");
  ExpectInvalid(Call("copy", {Buf(a)}, {Buf(r5)}),
                "copy: results[0] must have args[0]'s spec float32[4], got "
                "float32[5]");
  ExpectInvalid(Call("copy", {Buf(a)}, {Buf(ri)}),
                "copy: results[0] must have args[0]'s spec float32[4], got "
                "int32[4]");
}

// ---------------------------------------------------------------------------
// scale

// alpha * x for values every float dtype holds exactly, so the expected
// result does not depend on how the handler rounds.
TEST(ScaleTest, ExactOnEveryFloatAndComplexDType) {
  for (DType d : kFloatAndComplex) {
    SCOPED_TRACE(DTypeName(d));
    const std::vector<double> x = {1, -2, 0.5, 3, 0, -0.25};
    std::vector<double> want;
    for (double v : x) want.push_back(2 * v);
    const std::vector<int64_t> dims = {static_cast<int64_t>(6 / Lanes(d))};
    for (bool aliased : {false, true}) {
      SCOPED_TRACE(aliased ? "aliased" : "not aliased");
      Tensor xt = Make(d, dims, x);
      Tensor out = Zeros(d, dims);
      FarcallBuffer result = aliased ? Buf(xt, 0) : Buf(out);
      ASSERT_TRUE(Call("scale", {Buf(xt)}, {result}, {F64("alpha", 2.0)}).ok());
      EXPECT_EQ(Parts(aliased ? xt : out), want);
    }
  }
}

// alpha = 0.3 rounds: narrow types compute alpha * x in float and round once.
TEST(ScaleTest, RoundsOnceOnEveryFloatAndComplexDType) {
  for (DType d : kFloatAndComplex) {
    SCOPED_TRACE(DTypeName(d));
    const double alpha = 0.3;
    const std::vector<int64_t> dims = {static_cast<int64_t>(8 / Lanes(d))};
    Tensor x = Make(d, dims, {1, -2, 0.5, 3, 7, -0.25, 1.5, 5});
    const std::vector<double> xs = Parts(x);
    std::vector<double> want;
    for (double v : xs) {
      want.push_back(ComputesInDouble(d)
                         ? alpha * v
                         : RoundTo(d, static_cast<float>(alpha) * static_cast<float>(v)));
    }
    Tensor out = Zeros(d, dims);
    ASSERT_TRUE(Call("scale", {Buf(x)}, {Buf(out)}, {F64("alpha", alpha)}).ok());
    EXPECT_EQ(Parts(out), want);
  }
}

TEST(ScaleTest, IntegerAlphaIsAccepted) {
  Tensor x = Make(DType::kF32, {2}, {1.5, -3});
  Tensor out = Zeros(DType::kF32, {2});
  ASSERT_TRUE(Call("scale", {Buf(x)}, {Buf(out)}, {I64("alpha", 3)}).ok());
  EXPECT_EQ(Parts(out), (std::vector<double>{4.5, -9}));
}

TEST(ScaleTest, RejectsNonFloatDTypes) {
  for (DType d : NotFloatOrComplex()) {
    SCOPED_TRACE(DTypeName(d));
    Tensor x = Zeros(d, {2});
    Tensor out = Zeros(d, {2});
    ExpectInvalid(Call("scale", {Buf(x)}, {Buf(out)}, {F64("alpha", 1)}),
                  "scale: dtype " + Name(d) + " is not supported (needs a float or complex dtype)");
  }
}

TEST(ScaleTest, RejectsBadFrames) {
  Tensor x = Zeros(DType::kF32, {4});
  Tensor out = Zeros(DType::kF32, {4});
  Tensor out5 = Zeros(DType::kF32, {5});
  Tensor out64 = Zeros(DType::kF64, {4});
  ExpectInvalid(Call("scale", {Buf(x)}, {Buf(out)}),
                "scale: attribute 'alpha': missing (expected float64 (or int64))");
  ExpectInvalid(Call("scale", {Buf(x)}, {Buf(out)}, {Str("alpha", "2")}),
                "scale: attribute 'alpha': expected float64 (or int64), got str");
  ExpectInvalid(Call("scale", {Buf(x)}, {Buf(out5)}, {F64("alpha", 1)}),
                "scale: result must have x's spec float32[4], got float32[5]");
  ExpectInvalid(Call("scale", {Buf(x)}, {Buf(out64)}, {F64("alpha", 1)}),
                "scale: result must have x's spec float32[4], got float64[4]");
  ExpectInvalid(Call("scale", {Buf(x), Buf(x)}, {Buf(out)}, {F64("alpha", 1)}),
                "scale: expected 1 arg and 1 result, got 2 args and 1 result");
}

// ---------------------------------------------------------------------------
// axpy

TEST(AxpyTest, ExactOnEveryFloatAndComplexDType) {
  for (DType d : kFloatAndComplex) {
    SCOPED_TRACE(DTypeName(d));
    const std::vector<double> x = {1, -2, 0.5, 3, 0, -0.25};
    const std::vector<double> y = {0.5, 1, -1, 2, 4, 0.25};
    const std::vector<double> want = {2.5, -3, 0, 8, 4, -0.25};
    const std::vector<int64_t> dims = {static_cast<int64_t>(6 / Lanes(d))};
    // -1: a fresh result; 1: {1: 0}, in place in y; 0: in place in x.
    for (int64_t alias : {-1, 1, 0}) {
      SCOPED_TRACE(alias);
      Tensor xt = Make(d, dims, x);
      Tensor yt = Make(d, dims, y);
      Tensor out = Zeros(d, dims);
      Tensor& holder = alias == 1 ? yt : alias == 0 ? xt : out;
      ASSERT_TRUE(Call("axpy", {Buf(xt), Buf(yt)}, {Buf(holder, alias)}, {F64("alpha", 2.0)}).ok());
      EXPECT_EQ(Parts(holder), want);
    }
  }
}

TEST(AxpyTest, RoundsOnceOnEveryFloatAndComplexDType) {
  for (DType d : kFloatAndComplex) {
    SCOPED_TRACE(DTypeName(d));
    const double alpha = -0.7;
    const std::vector<int64_t> dims = {static_cast<int64_t>(8 / Lanes(d))};
    Tensor x = Make(d, dims, {1, -2, 0.5, 3, 7, -0.25, 1.5, 5});
    Tensor y = Make(d, dims, {0.1, 2, -3, 0.3, 1, 6, -1.5, 0.2});
    const std::vector<double> xs = Parts(x);
    const std::vector<double> ys = Parts(y);
    std::vector<double> want;
    for (size_t i = 0; i < xs.size(); ++i) {
      if (ComputesInDouble(d)) {
        want.push_back(alpha * xs[i] + ys[i]);
      } else {
        const float r =
            static_cast<float>(alpha) * static_cast<float>(xs[i]) + static_cast<float>(ys[i]);
        want.push_back(RoundTo(d, r));
      }
    }
    ASSERT_TRUE(Call("axpy", {Buf(x), Buf(y)}, {Buf(y, 1)}, {F64("alpha", alpha)}).ok());
    EXPECT_EQ(Parts(y), want);
  }
}

TEST(AxpyTest, LargeInPlaceFloat32) {
  // Long enough for the vectorised loop and its tail.
  const int64_t n = 1003;
  std::vector<double> x(n), y(n), want(n);
  for (int64_t i = 0; i < n; ++i) {
    x[i] = static_cast<double>(i);
    y[i] = static_cast<double>(2 * i + 1);
    want[i] = 0.5 * x[i] + y[i];
  }
  Tensor xt = Make(DType::kF32, {n}, x);
  Tensor yt = Make(DType::kF32, {n}, y);
  ASSERT_TRUE(Call("axpy", {Buf(xt), Buf(yt)}, {Buf(yt, 1)}, {F64("alpha", 0.5)}).ok());
  EXPECT_EQ(Parts(yt), want);
  EXPECT_EQ(Parts(xt), x);
}

TEST(AxpyTest, RejectsNonFloatDTypes) {
  for (DType d : NotFloatOrComplex()) {
    SCOPED_TRACE(DTypeName(d));
    Tensor x = Zeros(d, {2});
    Tensor y = Zeros(d, {2});
    ExpectInvalid(Call("axpy", {Buf(x), Buf(y)}, {Buf(y, 1)}, {F64("alpha", 1)}),
                  "axpy: dtype " + Name(d) + " is not supported (needs a float or complex dtype)");
  }
}

TEST(AxpyTest, RejectsBadFrames) {
  Tensor x = Zeros(DType::kF32, {4});
  Tensor y = Zeros(DType::kF32, {4});
  Tensor y5 = Zeros(DType::kF32, {5});
  Tensor y64 = Zeros(DType::kF64, {4});
  Tensor y22 = Zeros(DType::kF32, {2, 2});
  ExpectInvalid(Call("axpy", {Buf(x), Buf(y5)}, {Buf(y5, 1)}, {F64("alpha", 1)}),
                "axpy: x and y must have the same spec, got float32[4] and float32[5]");
  ExpectInvalid(Call("axpy", {Buf(x), Buf(y64)}, {Buf(y64, 1)}, {F64("alpha", 1)}),
                "axpy: x and y must have the same spec, got float32[4] and float64[4]");
  ExpectInvalid(Call("axpy", {Buf(x), Buf(y)}, {Buf(y22)}, {F64("alpha", 1)}),
                "axpy: result must have y's spec float32[4], got float32[2,2]");
  ExpectInvalid(Call("axpy", {Buf(x), Buf(y)}, {Buf(y, 1)}),
                "axpy: attribute 'alpha': missing (expected float64 (or int64))");
  ExpectInvalid(Call("axpy", {Buf(x)}, {Buf(y)}, {F64("alpha", 1)}),
                "axpy: expected 2 args and 1 result, got 1 arg and 1 result");
}

// ---------------------------------------------------------------------------
// add

TEST(AddTest, EveryNumericDType) {
  for (DType d : NumericDTypes()) {
    SCOPED_TRACE(DTypeName(d));
    // Small non-negative values that every numeric dtype holds exactly.
    const std::vector<double> a = {1, 2, 3, 0, 4, 6};
    const std::vector<double> b = {6, 1, 3, 8, 4, 2};
    const std::vector<double> want = {7, 3, 6, 8, 8, 8};
    const std::vector<int64_t> dims = {static_cast<int64_t>(6 / Lanes(d))};
    for (int64_t alias : {-1, 0, 1}) {
      SCOPED_TRACE(alias);
      Tensor at = Make(d, dims, a);
      Tensor bt = Make(d, dims, b);
      Tensor out = Zeros(d, dims);
      Tensor& holder = alias == 0 ? at : alias == 1 ? bt : out;
      ASSERT_TRUE(Call("add", {Buf(at), Buf(bt)}, {Buf(holder, alias)}).ok());
      EXPECT_EQ(Parts(holder), want);
    }
  }
}

TEST(AddTest, SignedAndRounding) {
  for (DType d : NumericDTypes()) {
    if (KindOf(d) == DTypeKind::kUnsigned) continue;
    SCOPED_TRACE(DTypeName(d));
    const std::vector<int64_t> dims = {static_cast<int64_t>(6 / Lanes(d))};
    Tensor a = Make(d, dims, {-1, 2.3, 3, -7, 0.3, 6});
    Tensor b = Make(d, dims, {-6, 1.1, -3.5, 4, 0.1, -20});
    const std::vector<double> as = Parts(a);
    const std::vector<double> bs = Parts(b);
    std::vector<double> want;
    for (size_t i = 0; i < as.size(); ++i) {
      if (ComputesInDouble(d) || (!IsFloating(d) && !IsComplex(d))) {
        want.push_back(RoundTo(d, as[i] + bs[i]));
      } else {
        want.push_back(RoundTo(d, static_cast<float>(as[i]) + static_cast<float>(bs[i])));
      }
    }
    Tensor out = Zeros(d, dims);
    ASSERT_TRUE(Call("add", {Buf(a), Buf(b)}, {Buf(out)}).ok());
    EXPECT_EQ(Parts(out), want);
  }
}

// Integer add wraps around like two's complement hardware.
template <typename T>
void ExpectWrappedAdd(DType d, T a, T b, T want) {
  SCOPED_TRACE(DTypeName(d));
  Tensor at = Zeros(d, {1});
  Tensor bt = Zeros(d, {1});
  Tensor out = Zeros(d, {1});
  std::memcpy(at.bytes.data(), &a, sizeof(T));
  std::memcpy(bt.bytes.data(), &b, sizeof(T));
  ASSERT_TRUE(Call("add", {Buf(at), Buf(bt)}, {Buf(out)}).ok());
  T got;
  std::memcpy(&got, out.bytes.data(), sizeof(T));
  EXPECT_EQ(got, want);
}

TEST(AddTest, IntegersWrapAround) {
  ExpectWrappedAdd<int8_t>(DType::kS8, 127, 1, -128);
  ExpectWrappedAdd<int8_t>(DType::kS8, -128, -1, 127);
  ExpectWrappedAdd<int16_t>(DType::kS16, 32767, 2, -32767);
  ExpectWrappedAdd<int32_t>(DType::kS32, std::numeric_limits<int32_t>::max(), 1,
                            std::numeric_limits<int32_t>::min());
  ExpectWrappedAdd<int64_t>(DType::kS64, std::numeric_limits<int64_t>::max(), 1,
                            std::numeric_limits<int64_t>::min());
  ExpectWrappedAdd<uint8_t>(DType::kU8, 255, 1, 0);
  ExpectWrappedAdd<uint16_t>(DType::kU16, 65535, 3, 2);
  ExpectWrappedAdd<uint32_t>(DType::kU32, 0xFFFFFFFFu, 2, 1);
  ExpectWrappedAdd<uint64_t>(DType::kU64, ~uint64_t{0}, 2, 1);
}

TEST(AddTest, RejectsBoolAndBadSpecs) {
  Tensor p = Zeros(DType::kPred, {2});
  ExpectInvalid(Call("add", {Buf(p), Buf(p)}, {Buf(p, 0)}),
                "add: dtype bool is not supported (needs an integer, float or "
                "complex dtype)");
  Tensor a = Zeros(DType::kS32, {4});
  Tensor b = Zeros(DType::kS32, {4, 1});
  Tensor out = Zeros(DType::kS32, {4});
  Tensor out_u = Zeros(DType::kU32, {4});
  ExpectInvalid(Call("add", {Buf(a), Buf(b)}, {Buf(out)}),
                "add: a and b must have the same spec, got int32[4] and "
                "int32[4,1]");
  ExpectInvalid(Call("add", {Buf(a), Buf(a)}, {Buf(out_u)}),
                "add: result must have a's spec int32[4], got uint32[4]");
  ExpectInvalid(Call("add", {Buf(a), Buf(a)}, {}),
                "add: expected 2 args and 1 result, got 2 args and 0 results");
}

// ---------------------------------------------------------------------------
// sum

TEST(SumTest, EveryNumericDType) {
  for (DType d : NumericDTypes()) {
    SCOPED_TRACE(DTypeName(d));
    const std::vector<double> x = {1, 2, 3, 0, 4, 6};
    const std::vector<int64_t> dims = {static_cast<int64_t>(6 / Lanes(d))};
    Tensor xt = Make(d, dims, x);
    Tensor out = Zeros(d, {});
    ASSERT_TRUE(Call("sum", {Buf(xt)}, {Buf(out)}).ok());
    if (IsComplex(d)) {
      EXPECT_EQ(Parts(out), (std::vector<double>{1 + 3 + 4, 2 + 0 + 6}));
    } else {
      EXPECT_EQ(Parts(out), (std::vector<double>{16}));
    }
  }
}

TEST(SumTest, ScalarAliasedAndEmpty) {
  for (DType d : NumericDTypes()) {
    SCOPED_TRACE(DTypeName(d));
    const std::vector<double> v = IsComplex(d) ? std::vector<double>{5, 3} : std::vector<double>{5};
    Tensor x = Make(d, {}, v);
    ASSERT_TRUE(Call("sum", {Buf(x)}, {Buf(x, 0)}).ok());
    EXPECT_EQ(Parts(x), v);

    Tensor empty = Zeros(d, {2, 0});
    Tensor out = Make(d, {}, std::vector<double>(Lanes(d), 1));
    ASSERT_TRUE(Call("sum", {Buf(empty)}, {Buf(out)}).ok());
    EXPECT_EQ(Parts(out), std::vector<double>(Lanes(d), 0));
  }
}

// A big value followed by ones that are each below its half-ulp: a float
// accumulator drops them, the double accumulator keeps them.
TEST(SumTest, AccumulatesWiderThanTheDType) {
  struct Case {
    DType dtype;
    double big;
  };
  for (const Case& c :
       {Case{DType::kF32, 16777216.0}, Case{DType::kF16, 2048}, Case{DType::kBF16, 256}}) {
    SCOPED_TRACE(DTypeName(c.dtype));
    std::vector<double> x(33, 1.0);
    x[0] = c.big;
    Tensor xt = Make(c.dtype, {33}, x);
    Tensor out = Zeros(c.dtype, {});
    ASSERT_TRUE(Call("sum", {Buf(xt)}, {Buf(out)}).ok());
    EXPECT_EQ(Parts(out), (std::vector<double>{c.big + 32}));
  }
}

TEST(SumTest, IntegersWrapAround) {
  Tensor s8 = Make(DType::kS8, {3}, {100, 100, 1});
  Tensor out8 = Zeros(DType::kS8, {});
  ASSERT_TRUE(Call("sum", {Buf(s8)}, {Buf(out8)}).ok());
  EXPECT_EQ(Parts(out8), (std::vector<double>{-55}));

  Tensor u16 = Make(DType::kU16, {2}, {65535, 2});
  Tensor out16 = Zeros(DType::kU16, {});
  ASSERT_TRUE(Call("sum", {Buf(u16)}, {Buf(out16)}).ok());
  EXPECT_EQ(Parts(out16), (std::vector<double>{1}));

  Tensor s64 = Zeros(DType::kS64, {2});
  const int64_t v[2] = {std::numeric_limits<int64_t>::max(), 2};
  std::memcpy(s64.bytes.data(), v, sizeof(v));
  Tensor out64 = Zeros(DType::kS64, {});
  ASSERT_TRUE(Call("sum", {Buf(s64)}, {Buf(out64)}).ok());
  int64_t got;
  std::memcpy(&got, out64.bytes.data(), sizeof(got));
  EXPECT_EQ(got, std::numeric_limits<int64_t>::min() + 1);
}

TEST(SumTest, RejectsBoolAndBadResults) {
  Tensor p = Zeros(DType::kPred, {2});
  Tensor po = Zeros(DType::kPred, {});
  ExpectInvalid(Call("sum", {Buf(p)}, {Buf(po)}),
                "sum: dtype bool is not supported (needs an integer, float or "
                "complex dtype)");
  Tensor x = Zeros(DType::kF32, {4});
  Tensor vec = Zeros(DType::kF32, {1});
  Tensor f64 = Zeros(DType::kF64, {});
  ExpectInvalid(Call("sum", {Buf(x)}, {Buf(vec)}),
                "sum: result must be a scalar of x's dtype (float32[]), got float32[1]");
  ExpectInvalid(Call("sum", {Buf(x)}, {Buf(f64)}),
                "sum: result must be a scalar of x's dtype (float32[]), got float64[]");
}

// ---------------------------------------------------------------------------
// crc32c

TEST(Crc32cHandlerTest, EveryDType) {
  for (DType d : AllDTypes()) {
    SCOPED_TRACE(DTypeName(d));
    Tensor x = RandomBytes(d, {3, 5}, 9);
    Tensor out = Zeros(DType::kU32, {});
    ASSERT_TRUE(Call("crc32c", {Buf(x)}, {Buf(out)}).ok());
    uint32_t got;
    std::memcpy(&got, out.bytes.data(), 4);
    EXPECT_EQ(got, builtins::Crc32c(x.bytes.data(), x.bytes.size()));
  }
}

TEST(Crc32cHandlerTest, KnownValueEmptyAndAliased) {
  Tensor x{DType::kU8, {9}, {'1', '2', '3', '4', '5', '6', '7', '8', '9'}};
  Tensor out = Zeros(DType::kU32, {});
  ASSERT_TRUE(Call("crc32c", {Buf(x)}, {Buf(out)}).ok());
  EXPECT_EQ(Parts(out), (std::vector<double>{0xE3069283u}));

  Tensor empty = Zeros(DType::kF32, {0});
  ASSERT_TRUE(Call("crc32c", {Buf(empty)}, {Buf(out)}).ok());
  EXPECT_EQ(Parts(out), (std::vector<double>{0}));

  // A uint32 scalar may be overwritten by its own checksum.
  Tensor s = Make(DType::kU32, {}, {12345});
  const uint32_t want = builtins::Crc32c(s.bytes.data(), 4);
  ASSERT_TRUE(Call("crc32c", {Buf(s)}, {Buf(s, 0)}).ok());
  EXPECT_EQ(Parts(s), (std::vector<double>{static_cast<double>(want)}));
}

TEST(Crc32cHandlerTest, RejectsBadResults) {
  Tensor x = Zeros(DType::kF32, {4});
  Tensor u64 = Zeros(DType::kU64, {});
  Tensor vec = Zeros(DType::kU32, {1});
  ExpectInvalid(Call("crc32c", {Buf(x)}, {Buf(u64)}),
                "crc32c: result must be uint32[], got uint64[]");
  ExpectInvalid(Call("crc32c", {Buf(x)}, {Buf(vec)}),
                "crc32c: result must be uint32[], got uint32[1]");
}

// ---------------------------------------------------------------------------
// Frames that disagree with themselves

TEST(FrameTest, RejectsInconsistentBuffers) {
  Tensor x = Zeros(DType::kF32, {4});
  Tensor out = Zeros(DType::kF32, {4});

  FarcallBuffer short_x = Buf(x);
  short_x.size_bytes = 12;
  ExpectInvalid(Call("scale", {short_x}, {Buf(out)}, {F64("alpha", 1)}),
                "scale: x holds 12 bytes but float32[4] needs 16");

  FarcallBuffer long_out = Buf(out);
  long_out.size_bytes = 20;
  ExpectInvalid(Call("add", {Buf(x), Buf(x)}, {long_out}),
                "add: result holds 20 bytes but float32[4] needs 16");

  FarcallBuffer unknown = Buf(x);
  unknown.dtype = 13;
  ExpectInvalid(Call("copy", {unknown}, {Buf(out)}), "copy: args[0] has unknown dtype 13");

  FarcallBuffer negative = Buf(x);
  const int64_t bad_dims[1] = {-4};
  negative.dims = bad_dims;
  ExpectInvalid(Call("sum", {negative}, {Buf(out)}), "sum: x has invalid dims float32[-4]");

  FarcallBuffer no_data = Buf(x);
  no_data.data = nullptr;
  ExpectInvalid(Call("crc32c", {no_data}, {Buf(out)}), "crc32c: x has no data");
}

// ---------------------------------------------------------------------------
// sleep

TEST(SleepTest, ZeroReturnsAtOnce) { EXPECT_TRUE(Call("sleep", {}, {}, {I64("ms", 0)}).ok()); }

TEST(SleepTest, AlreadyCancelled) {
  CancellationToken cancel;
  cancel.Cancel();
  absl::Status s = Call("sleep", {}, {}, {I64("ms", 600000)}, &cancel);
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
  EXPECT_THAT(std::string(s.message()), StartsWith("sleep: cancelled after "));
  EXPECT_THAT(std::string(s.message()), HasSubstr(" ms of 600000"));
}

// The sleep would take 10 minutes; cancelling from another thread ends it.
// The handler may start waiting before or after the cancel; either way it
// must come back CANCELLED, and the wall-clock bound only catches a hang.
TEST(SleepTest, CancelledFromAnotherThread) {
  CancellationToken cancel;
  const auto start = std::chrono::steady_clock::now();
  std::thread canceller([&] { cancel.Cancel(); });
  absl::Status s = Call("sleep", {}, {}, {I64("ms", 600000)}, &cancel);
  canceller.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
  EXPECT_THAT(std::string(s.message()), StartsWith("sleep: cancelled after "));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60));
}

TEST(SleepTest, RejectsBadAttributes) {
  ExpectInvalid(Call("sleep", {}, {}), "sleep: attribute 'ms': missing (expected int64)");
  ExpectInvalid(Call("sleep", {}, {}, {F64("ms", 5)}),
                "sleep: attribute 'ms': expected int64, got float64");
  ExpectInvalid(Call("sleep", {}, {}, {I64("ms", -1)}),
                "sleep: attribute 'ms' must be >= 0, got -1");
  Tensor x = Zeros(DType::kF32, {1});
  ExpectInvalid(Call("sleep", {Buf(x)}, {}, {I64("ms", 0)}),
                "sleep: expected 0 args and 0 results, got 1 arg and 0 results");
}

// ---------------------------------------------------------------------------
// fail

TEST(FailTest, ReturnsTheGivenStatus) {
  for (int64_t code = 1; code <= 16; ++code) {
    SCOPED_TRACE(code);
    absl::Status s = Call("fail", {}, {}, {I64("code", code), Str("message", "boom here")});
    EXPECT_EQ(s.code(), static_cast<absl::StatusCode>(code));
    EXPECT_EQ(std::string(s.message()), "boom here");
  }
}

TEST(FailTest, CodeZeroIsOk) {
  EXPECT_TRUE(Call("fail", {}, {}, {I64("code", 0), Str("message", "")}).ok());
}

TEST(FailTest, RejectsBadAttributes) {
  ExpectInvalid(Call("fail", {}, {}, {I64("code", 17), Str("message", "x")}),
                "fail: code 17 is not a status code (1..16)");
  ExpectInvalid(Call("fail", {}, {}, {I64("code", -3), Str("message", "x")}),
                "fail: code -3 is not a status code (1..16)");
  ExpectInvalid(Call("fail", {}, {}, {Str("message", "x")}),
                "fail: attribute 'code': missing (expected int64)");
  ExpectInvalid(Call("fail", {}, {}, {I64("code", 3)}),
                "fail: attribute 'message': missing (expected str)");
  ExpectInvalid(Call("fail", {}, {}, {Str("code", "3"), Str("message", "x")}),
                "fail: attribute 'code': expected int64, got str");
}

}  // namespace
}  // namespace farcall::agent::cpu
