// Typed bindings (farcall/handler_binding.h): what a bound handler is given,
// and the errors a call that does not match gets before the body runs.
#include <string>
#include <string_view>
#include <vector>

#include "farcall/handler.h"
#include "gtest/gtest.h"

namespace farcall::sdk {
namespace {

using F32 = Tensor<FARCALL_DTYPE_F32>;
using F32Vector = Tensor<FARCALL_DTYPE_F32, 1>;

// A call frame over buffers and attributes the test owns.
struct Frame {
  std::vector<int64_t> dims = {4};
  std::vector<float> x = {1, 2, 3, 4}, y = {0, 0, 0, 0};
  std::vector<FarcallBuffer> args, results;
  std::vector<FarcallAttribute> attrs;
  FarcallContext ctx{sizeof(FarcallContext), "cpu", 0, FARCALL_STREAM_NONE, nullptr, nullptr};
  FarcallCallFrame frame{};

  Frame() {
    args.push_back(Buf(FARCALL_DTYPE_F32, x.data()));
    results.push_back(Buf(FARCALL_DTYPE_F32, y.data()));
  }
  FarcallBuffer Buf(int32_t dtype, void* data) {
    FarcallBuffer b{};
    b.struct_size = sizeof(b);
    b.dtype = dtype;
    b.rank = static_cast<int64_t>(dims.size());
    b.dims = dims.data();
    b.data = data;
    b.size_bytes = 16;
    b.aliased_arg = -1;
    return b;
  }
  FarcallAttribute& Named(const char* name, int32_t type) {
    FarcallAttribute a{};
    a.struct_size = sizeof(a);
    a.name = name;
    a.name_size = std::string_view(name).size();
    a.type = type;
    return attrs.emplace_back(a);
  }
  void F64(const char* name, double v) { Named(name, FARCALL_ATTR_F64).f64 = v; }
  void Str(const char* name, const char* v) {
    FarcallAttribute& a = Named(name, FARCALL_ATTR_STR);
    a.str = v;
    a.str_size = std::string_view(v).size();
  }
  CallFrame Call() {
    frame.struct_size = sizeof(frame);
    frame.ctx = &ctx;
    frame.num_args = args.size();
    frame.args = args.data();
    frame.num_results = results.size();
    frame.results = results.data();
    frame.num_attrs = attrs.size();
    frame.attrs = attrs.data();
    return CallFrame(&frame);
  }
};

Status Scale(F32 x, double alpha, F32 out) {
  for (int64_t i = 0; i < x.element_count(); ++i) out.data()[i] = alpha * x.data()[i];
  return OkStatus();
}

const auto kScale = Bind().Arg<F32>().Attr<double>("alpha").Ret<F32>();

TEST(HandlerBindingTest, AMatchingCallRunsTheBodyWithTypedValues) {
  Frame f;
  f.F64("alpha", 2.5);
  CallFrame call = f.Call();
  Status s = kScale.Call(Scale, call);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(f.y, (std::vector<float>{2.5, 5, 7.5, 10}));
}

TEST(HandlerBindingTest, CountsDTypesRanksAndAttributesAreCheckedFirst) {
  int ran = 0;
  auto body = [&](F32, double, F32) {
    ++ran;
    return OkStatus();
  };
  {
    Frame f;  // no alpha
    CallFrame call = f.Call();
    EXPECT_EQ(kScale.Call(body, call).message(),
              "attribute 'alpha': missing (expected float64 (or int64))");
  }
  {
    Frame f;
    f.Str("alpha", "two");
    CallFrame call = f.Call();
    EXPECT_EQ(kScale.Call(body, call).message(),
              "attribute 'alpha': expected float64 (or int64), got str");
  }
  {
    Frame f;
    f.F64("alpha", 1);
    f.args[0].dtype = FARCALL_DTYPE_S32;
    CallFrame call = f.Call();
    Status s = kScale.Call(body, call);
    EXPECT_EQ(s.code(), FARCALL_CODE_INVALID_ARGUMENT);
    EXPECT_EQ(s.message(), "arg 0: expected float32, got int32");
  }
  {
    Frame f;
    f.args.push_back(f.args[0]);
    CallFrame call = f.Call();
    EXPECT_EQ(kScale.Call(body, call).message(),
              "expected 1 arg and 1 result, got 2 args and 1 result");
    // Named after the handler, when the binding knows it.
    auto named = Bind("my.scale").Arg<F32>().Attr<double>("alpha").Ret<F32>();
    EXPECT_EQ(named.Call(body, call).message(),
              "my.scale: expected 1 arg and 1 result, got 2 args and 1 result");
  }
  {
    Frame f;
    f.dims = {2, 2};
    f.args[0] = f.Buf(FARCALL_DTYPE_F32, f.x.data());
    CallFrame call = f.Call();
    auto vector_only = Bind().Arg<F32Vector>().Ret<F32>();
    EXPECT_EQ(vector_only.Call([&](F32Vector, F32) { return OkStatus(); }, call).message(),
              "arg 0: expected rank 1, got rank 2");
  }
  EXPECT_EQ(ran, 0);
}

TEST(HandlerBindingTest, OptionalAttributesAnyDTypesAndTheContext) {
  Frame f;
  CallFrame call = f.Call();
  auto binding = Bind().Arg<Tensor<>>().Attr<std::optional<double>>("lo").Ctx().Ret<Tensor<>>();
  bool saw = false;
  Status s = binding.Call(
      [&](Tensor<> x, std::optional<double> lo, CallFrame& ctx, Tensor<> out) {
        saw = !lo.has_value() && x.dtype() == FARCALL_DTYPE_F32 && ctx.platform() == "cpu" &&
              out.dims().size() == 1 && out.dims()[0] == 4 && out.dims().at(7) == 0;
        return OkStatus();
      },
      call);
  EXPECT_TRUE(s.ok()) << s.message();
  EXPECT_TRUE(saw);
}

TEST(HandlerSdkTest, RawAccessorsAreCheckedWithoutABinding) {
  Frame f;
  CallFrame call = f.Call();
  Buffer x = call.arg(0);
  EXPECT_EQ(x.typed_data<float>(), f.x.data());
  EXPECT_EQ(x.typed_data<const float>(), f.x.data());
  EXPECT_EQ(x.typed_data<int32_t>(), nullptr);  // float32 is not int32
  EXPECT_EQ(x.typed_data<double>(), nullptr);
  EXPECT_EQ(x.shape().size(), 1u);
  EXPECT_EQ(x.shape()[0], 4);
  EXPECT_EQ(x.dim(0), 4);
  EXPECT_EQ(x.dim(1), 0);  // past the rank
  EXPECT_EQ(x.dim(-1), 0);
  // Past the args or results: an empty buffer, not a read out of bounds.
  Buffer none = call.arg(5);
  EXPECT_EQ(none.dtype(), FARCALL_DTYPE_INVALID);
  EXPECT_EQ(none.rank(), 0);
  EXPECT_EQ(none.raw(), nullptr);
  EXPECT_EQ(none.typed_data<float>(), nullptr);
  EXPECT_TRUE(none.shape().empty());
  EXPECT_EQ(call.result(1).size_bytes(), 0u);
  EXPECT_EQ(call.result(1).aliased_arg(), -1);
  // The raw-bits types match every dtype stored in them.
  static_assert(IsElementType<uint16_t>(FARCALL_DTYPE_BF16));
  static_assert(IsElementType<uint16_t>(FARCALL_DTYPE_F16));
  static_assert(IsElementType<std::complex<float>>(FARCALL_DTYPE_C64));
  static_assert(!IsElementType<float>(FARCALL_DTYPE_C64));
}

TEST(HandlerDTypesTest, SizesKindsAndParts) {
  static_assert(ItemSize(FARCALL_DTYPE_BF16) == 2 && ItemSize(FARCALL_DTYPE_C128) == 16);
  static_assert(ItemSize(FARCALL_DTYPE_F8E4M3FNUZ) == 1 && ItemSize(FARCALL_DTYPE_INVALID) == 0);
  EXPECT_FALSE(IsKnownDType(13));  // a number the wire does not use
  EXPECT_TRUE(IsFloating(FARCALL_DTYPE_F8E5M2));
  EXPECT_FALSE(IsFloating(FARCALL_DTYPE_C64));
  EXPECT_TRUE(IsComplex(FARCALL_DTYPE_C64));
  EXPECT_TRUE(IsNumeric(FARCALL_DTYPE_U64));
  EXPECT_FALSE(IsNumeric(FARCALL_DTYPE_PRED));
  EXPECT_FALSE(IsNumeric(99));
  EXPECT_EQ(PartDType(FARCALL_DTYPE_C128), FARCALL_DTYPE_F64);
  EXPECT_EQ(PartDType(FARCALL_DTYPE_S32), FARCALL_DTYPE_S32);
  EXPECT_EQ(Lanes(FARCALL_DTYPE_C64), 2);
  EXPECT_EQ(DTypeName(FARCALL_DTYPE_F8E4M3B11FNUZ), "float8_e4m3b11fnuz");
}

}  // namespace
}  // namespace farcall::sdk
