// farcall handler SDK: typed bindings. A handler declares what it takes, and
// the binding checks a call against that before the handler's body runs:
// the number of args and results, each one's dtype and rank, and each
// attribute's presence and type, answering INVALID_ARGUMENT with "expected
// ..., got ..." otherwise (after the handler's name given to Bind()). The
// body then gets typed values:
//
//   using farcall::sdk::Tensor;
//   farcall::sdk::Status ScaleImpl(Tensor<FARCALL_DTYPE_F32> x, double alpha,
//                                  Tensor<FARCALL_DTYPE_F32> out) {
//     for (int64_t i = 0; i < x.element_count(); ++i) out.data()[i] = alpha * x.data()[i];
//     return farcall::sdk::OkStatus();
//   }
//   FARCALL_BOUND_HANDLER(Scale, ScaleImpl,
//                         farcall::sdk::Bind("my.scale")
//                             .Arg<Tensor<FARCALL_DTYPE_F32>>()
//                             .Attr<double>("alpha")
//                             .Ret<Tensor<FARCALL_DTYPE_F32>>());
//   FARCALL_PLUGIN("my_plugin", FARCALL_HANDLER_DEF("my.scale", "cpu", 0, Scale));
//
// The body's parameters come in the binding's order. What a binding can ask
// for:
//   .Arg<Tensor<D, R>>()   the next arg, of dtype D and rank R (kAnyDType,
//                          kAnyRank: not checked);
//   .Ret<Tensor<D, R>>()   the next result, likewise;
//   .Attr<T>("name")       an attribute: int64_t, double (an int64 value is
//                          taken too), bool or std::string_view; as
//                          std::optional<T> it may be missing;
//   .Ctx()                 the CallFrame itself: the platform stream
//                          (stream<T>(), cuda_stream(), ...), cancellation.
// Included by farcall/handler.h; needs nothing but the standard library.
#ifndef FARCALL_HANDLER_BINDING_H_
#define FARCALL_HANDLER_BINDING_H_

#include <complex>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

#ifndef FARCALL_HANDLER_H_
#error "include farcall/handler.h, which includes this"
#endif

namespace farcall::sdk {

inline constexpr int32_t kAnyDType = -1;
inline constexpr int64_t kAnyRank = -1;

// An arg or result whose dtype D and rank R the binding checked.
template <int32_t D = kAnyDType, int64_t R = kAnyRank>
class Tensor {
 public:
  using T = typename ElementType<D>::type;
  static constexpr int32_t kDType = D;
  static constexpr int64_t kRank = R;

  explicit Tensor(const FarcallBuffer* b) : b_(b) {}
  // The elements (device memory on device platforms). For kAnyDType, void*.
  T* data() const { return static_cast<T*>(b_->data); }
  FarcallDType dtype() const { return static_cast<FarcallDType>(b_->dtype); }
  int64_t rank() const { return b_->rank; }
  Span<int64_t> dims() const { return Span<int64_t>(b_->dims, static_cast<size_t>(b_->rank)); }
  // The agent checked that the byte size fits in int64, so this cannot
  // overflow.
  int64_t element_count() const {
    int64_t n = 1;
    for (int64_t d : dims()) n *= d;
    return n;
  }
  uint64_t size_bytes() const { return b_->size_bytes; }
  // Results: the arg this one aliases (its memory, holding the input), or -1.
  int64_t aliased_arg() const { return b_->aliased_arg; }
  const FarcallBuffer* raw() const { return b_; }

 private:
  const FarcallBuffer* b_;
};

namespace internal {

template <class TensorT>
struct ArgPart {
  using type = TensorT;
};
template <class TensorT>
struct RetPart {
  using type = TensorT;
};
template <class V>
struct AttrPart {
  using type = V;
  const char* name;
};
struct CtxPart {};

template <class P>
struct IsArg : std::false_type {};
template <class T>
struct IsArg<ArgPart<T>> : std::true_type {};
template <class P>
struct IsRet : std::false_type {};
template <class T>
struct IsRet<RetPart<T>> : std::true_type {};
template <class P>
struct IsCtx : std::is_same<P, CtxPart> {};
template <class V>
struct Optional {
  using type = V;
  static constexpr bool kOptional = false;
};
template <class V>
struct Optional<std::optional<V>> {
  using type = V;
  static constexpr bool kOptional = true;
};

// How many of Ps[0..K) are what Is says.
template <template <class> class Is, size_t K, class... Ps>
constexpr size_t CountBefore() {
  constexpr bool is[] = {Is<Ps>::value..., false};
  size_t n = 0;
  for (size_t i = 0; i != K; ++i) n += is[i] ? 1 : 0;
  return n;
}

inline std::string Plural(size_t n, const char* what) {
  return std::to_string(n) + " " + what + (n == 1 ? "" : "s");
}

inline std::string AttrTypeName(int32_t t) {
  switch (t) {
    case FARCALL_ATTR_I64:
      return "int64";
    case FARCALL_ATTR_F64:
      return "float64";
    case FARCALL_ATTR_BOOL:
      return "bool";
    case FARCALL_ATTR_STR:
      return "str";
    default:
      return "unknown";
  }
}

template <class V>
constexpr const char* AttrWanted() {
  if constexpr (std::is_same_v<V, int64_t>) return "int64";
  if constexpr (std::is_same_v<V, double>) return "float64 (or int64)";
  if constexpr (std::is_same_v<V, bool>) return "bool";
  if constexpr (std::is_same_v<V, std::string_view>) return "str";
  return "?";
}

}  // namespace internal

// A binding: what a handler takes, in order (see the top of this file).
template <class... Parts>
class Binding {
 public:
  explicit Binding(const char* handler = nullptr) : handler_(handler) {}
  Binding(const char* handler, std::tuple<Parts...> parts)
      : handler_(handler), parts_(std::move(parts)) {}

  template <class TensorT>
  Binding<Parts..., internal::ArgPart<TensorT>> Arg() const {
    return Append(internal::ArgPart<TensorT>{});
  }
  template <class TensorT>
  Binding<Parts..., internal::RetPart<TensorT>> Ret() const {
    return Append(internal::RetPart<TensorT>{});
  }
  template <class V>
  Binding<Parts..., internal::AttrPart<V>> Attr(const char* name) const {
    static_assert(std::is_same_v<typename internal::Optional<V>::type, int64_t> ||
                      std::is_same_v<typename internal::Optional<V>::type, double> ||
                      std::is_same_v<typename internal::Optional<V>::type, bool> ||
                      std::is_same_v<typename internal::Optional<V>::type, std::string_view>,
                  "attributes are int64_t, double, bool or std::string_view (or optional)");
    return Append(internal::AttrPart<V>{name});
  }
  Binding<Parts..., internal::CtxPart> Ctx() const { return Append(internal::CtxPart{}); }

  static constexpr size_t kArgs = (size_t{0} + ... + internal::IsArg<Parts>::value);
  static constexpr size_t kRets = (size_t{0} + ... + internal::IsRet<Parts>::value);

  // Checks `call` against the binding, then runs fn(values...) and returns
  // its Status; INVALID_ARGUMENT (naming `handler`) without running it when
  // the call does not match.
  template <class Fn>
  Status Call(Fn&& fn, CallFrame& call) const {
    return CallWith(std::forward<Fn>(fn), call, std::index_sequence_for<Parts...>{});
  }

 private:
  template <class P>
  Binding<Parts..., P> Append(P p) const {
    return Binding<Parts..., P>(handler_, std::tuple_cat(parts_, std::make_tuple(p)));
  }
  // INVALID_ARGUMENT, with the handler's name first when the binding has one.
  Status Refuse(const std::string& why) const {
    return InvalidArgument(handler_ != nullptr ? std::string(handler_) + ": " + why : why);
  }

  template <class Fn, size_t... K>
  Status CallWith(Fn&& fn, CallFrame& call, std::index_sequence<K...>) const;

  const char* handler_;  // for messages; may be null
  std::tuple<Parts...> parts_;
};

// An empty binding, to add parts to. `handler`, when given, starts the
// binding's error messages ("my.scale: arg 0: expected float32, got int32").
inline Binding<> Bind(const char* handler = nullptr) { return Binding<>(handler); }

namespace internal {

// Checks one buffer against TensorT; the first problem goes into `error`.
template <class TensorT>
std::optional<TensorT> DecodeTensor(const FarcallBuffer* b, const char* what, size_t i,
                                    std::string& error) {
  std::string problem;
  if (TensorT::kDType != kAnyDType && b->dtype != TensorT::kDType) {
    problem = std::string("expected ") + std::string(DTypeName(TensorT::kDType)) + ", got " +
              std::string(DTypeName(b->dtype));
  } else if (TensorT::kRank != kAnyRank && b->rank != TensorT::kRank) {
    problem =
        "expected rank " + std::to_string(TensorT::kRank) + ", got rank " + std::to_string(b->rank);
  }
  if (!problem.empty() && error.empty()) {
    error = std::string(what) + " " + std::to_string(i) + ": " + problem;
  }
  return TensorT(b);
}

// The attribute `name` as V (or std::optional<U>); the first problem goes
// into `error`.
template <class V>
std::optional<V> DecodeAttr(const CallFrame& call, const char* name, std::string& error) {
  using U = typename Optional<V>::type;
  const FarcallAttribute* a = call.FindAttr(name);
  auto fail = [&](const std::string& problem) {
    if (error.empty()) error = std::string("attribute '") + name + "': " + problem;
    return std::optional<V>(V{});
  };
  if (a == nullptr) {
    if constexpr (Optional<V>::kOptional) {
      return std::optional<V>(V{});  // an empty optional: missing is fine
    } else {
      return fail(std::string("missing (expected ") + AttrWanted<U>() + ")");
    }
  }
  const std::string wrong =
      std::string("expected ") + AttrWanted<U>() + ", got " + AttrTypeName(a->type);
  if constexpr (std::is_same_v<U, int64_t>) {
    if (a->type != FARCALL_ATTR_I64) return fail(wrong);
    return std::optional<V>(V(a->i64));
  } else if constexpr (std::is_same_v<U, double>) {
    if (a->type == FARCALL_ATTR_F64) return std::optional<V>(V(a->f64));
    if (a->type == FARCALL_ATTR_I64) return std::optional<V>(V(static_cast<double>(a->i64)));
    return fail(wrong);
  } else if constexpr (std::is_same_v<U, bool>) {
    if (a->type != FARCALL_ATTR_BOOL) return fail(wrong);
    return std::optional<V>(V(a->b != 0));
  } else {
    if (a->type != FARCALL_ATTR_STR) return fail(wrong);
    return std::optional<V>(V(std::string_view(a->str, a->str_size)));
  }
}

}  // namespace internal

template <class... Parts>
template <class Fn, size_t... K>
Status Binding<Parts...>::CallWith(Fn&& fn, CallFrame& call, std::index_sequence<K...>) const {
  if (call.num_args() != kArgs || call.num_results() != kRets) {
    return Refuse("expected " + internal::Plural(kArgs, "arg") + " and " +
                  internal::Plural(kRets, "result") + ", got " +
                  internal::Plural(call.num_args(), "arg") + " and " +
                  internal::Plural(call.num_results(), "result"));
  }
  std::string error;
  const FarcallCallFrame* f = call.raw();
  auto decode = [&](auto k) {
    constexpr size_t kK = decltype(k)::value;
    using P = std::tuple_element_t<kK, std::tuple<Parts...>>;
    if constexpr (internal::IsArg<P>::value) {
      constexpr size_t i = internal::CountBefore<internal::IsArg, kK, Parts...>();
      return internal::DecodeTensor<typename P::type>(&f->args[i], "arg", i, error);
    } else if constexpr (internal::IsRet<P>::value) {
      constexpr size_t i = internal::CountBefore<internal::IsRet, kK, Parts...>();
      return internal::DecodeTensor<typename P::type>(&f->results[i], "result", i, error);
    } else if constexpr (internal::IsCtx<P>::value) {
      return std::optional<std::reference_wrapper<CallFrame>>(call);
    } else {
      return internal::DecodeAttr<typename P::type>(call, std::get<kK>(parts_).name, error);
    }
  };
  // A handler that does not fit its binding fails here, with this message,
  // rather than deep inside std::apply.
  static_assert(
      std::is_invocable_r_v<Status, Fn&,
                            typename decltype(decode(
                                std::integral_constant<size_t, K>{}))::value_type&...>,
      "farcall: the handler's parameters do not match its binding: it must take, in order, one "
      "parameter per Arg, Ret, Ctx and Attr of the binding, of those types, and return Status");
  // Braces: the parts are decoded in order, so the first problem is named.
  std::tuple<decltype(decode(std::integral_constant<size_t, K>{}))...> values{
      decode(std::integral_constant<size_t, K>{})...};
  if (!error.empty()) return Refuse(error);
  return std::apply([&](auto&... v) { return fn(*v...); }, values);
}

}  // namespace farcall::sdk

// Defines `static farcall::sdk::Status symbol(farcall::sdk::CallFrame&)`, a
// handler that checks each call against `binding` (farcall::sdk::Bind()...)
// and then calls impl(values...). Use `symbol` in FARCALL_HANDLER_DEF.
#define FARCALL_BOUND_HANDLER(symbol, impl, ...)                          \
  static ::farcall::sdk::Status symbol(::farcall::sdk::CallFrame& call) { \
    static const auto binding = __VA_ARGS__;                              \
    return binding.Call(impl, call);                                      \
  }

#endif  // FARCALL_HANDLER_BINDING_H_
