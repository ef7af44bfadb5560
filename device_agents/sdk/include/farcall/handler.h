// farcall handler SDK: a header-only C++ wrapper over farcall/handler_api.h.
//
// It has no dependencies beyond the standard library, so plugins build with
// nothing but this folder. A handler is a plain function:
//
//   farcall::sdk::Status Twice(farcall::sdk::CallFrame& call) {
//     if (call.num_args() != 1) return farcall::sdk::InvalidArgument("twice: one arg");
//     const float* x = call.arg(0).data<float>();
//     float* y = call.result(0).data<float>();
//     for (int64_t i = 0; i < call.arg(0).element_count(); ++i) y[i] = 2 * x[i];
//     return farcall::sdk::OkStatus();
//   }
//
//   FARCALL_PLUGIN("my_plugin",
//                  FARCALL_HANDLER_DEF("twice", "cpu", 0, Twice));
//
// Exceptions thrown by a handler are caught at the ABI boundary and become
// INTERNAL errors. Everything a CallFrame hands out is borrowed for the call.
#ifndef FARCALL_HANDLER_H_
#define FARCALL_HANDLER_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "farcall/handler_api.h"
#include "farcall/handler_dtypes.h"  // IWYU pragma: export

namespace farcall::sdk {

// A code (FarcallCode) and a message. Cheap to return on success.
class Status {
 public:
  Status() = default;
  Status(FarcallCode code, std::string message) : code_(code), message_(std::move(message)) {}
  bool ok() const { return code_ == FARCALL_CODE_OK; }
  FarcallCode code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  FarcallCode code_ = FARCALL_CODE_OK;
  std::string message_;
};

inline Status OkStatus() { return Status(); }
inline Status InvalidArgument(std::string m) {
  return Status(FARCALL_CODE_INVALID_ARGUMENT, std::move(m));
}
inline Status Internal(std::string m) { return Status(FARCALL_CODE_INTERNAL, std::move(m)); }
inline Status Cancelled(std::string m) { return Status(FARCALL_CODE_CANCELLED, std::move(m)); }
inline Status Unimplemented(std::string m) {
  return Status(FARCALL_CODE_UNIMPLEMENTED, std::move(m));
}

// A read-only view of `size()` items; at(i) is checked (a value-initialised
// item past the end, never a read out of bounds).
template <typename T>
class Span {
 public:
  Span(const T* data, size_t size) : data_(data), size_(size) {}
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const T& operator[](size_t i) const { return data_[i]; }
  T at(size_t i) const { return i < size_ ? data_[i] : T{}; }
  const T* begin() const { return data_; }
  const T* end() const { return data_ + size_; }

 private:
  const T* data_;
  size_t size_;
};

// A read-only view of one FarcallBuffer. A CallFrame hands out an empty one
// (no dtype, rank 0, no data) for an index past its args or results.
class Buffer {
 public:
  explicit Buffer(const FarcallBuffer* b) : b_(b) {}
  FarcallDType dtype() const { return static_cast<FarcallDType>(b_->dtype); }
  int64_t rank() const { return b_->rank; }
  // Dimension i, or 0 past the rank.
  int64_t dim(int64_t i) const {
    return i >= 0 && i < b_->rank && b_->dims != nullptr ? b_->dims[i] : 0;
  }
  Span<int64_t> shape() const {
    return Span<int64_t>(b_->dims, b_->dims != nullptr && b_->rank > 0 ? b_->rank : 0);
  }
  const int64_t* dims() const { return b_->dims; }
  uint64_t size_bytes() const { return b_->size_bytes; }
  int64_t element_count() const {
    int64_t n = 1;
    for (int64_t i = 0; i < b_->rank; ++i) n *= b_->dims[i];
    return n;
  }
  // Result index `aliased_arg()` >= 0 means this result is that arg's memory.
  int64_t aliased_arg() const { return b_->aliased_arg; }
  void* raw() const { return b_->data; }
  // The elements as T, or null when T is not this dtype's element type
  // (ElementType: float for float32, uint16_t for bfloat16's bits, ...).
  template <typename T>
  T* typed_data() const {
    return IsElementType<std::remove_cv_t<T>>(b_->dtype) ? static_cast<T*>(b_->data) : nullptr;
  }
  // The elements as T, unchecked: prefer typed_data() or a binding.
  template <typename T>
  T* data() const {
    return static_cast<T*>(b_->data);
  }
  // Same dtype and dims.
  bool SameSpec(const Buffer& o) const {
    if (b_->dtype != o.b_->dtype || b_->rank != o.b_->rank) return false;
    for (int64_t i = 0; i < b_->rank; ++i)
      if (b_->dims[i] != o.b_->dims[i]) return false;
    return true;
  }

 private:
  const FarcallBuffer* b_;
};

// A view of the call: args, results, attributes and context.
class CallFrame {
 public:
  explicit CallFrame(const FarcallCallFrame* f) : f_(f) {}

  size_t num_args() const { return f_->num_args; }
  size_t num_results() const { return f_->num_results; }
  // Past the end: an empty buffer (see Buffer), never out of bounds.
  Buffer arg(size_t i) const { return Buffer(i < f_->num_args ? &f_->args[i] : &kNoBuffer); }
  Buffer result(size_t i) const {
    return Buffer(i < f_->num_results ? &f_->results[i] : &kNoBuffer);
  }

  std::string_view platform() const { return f_->ctx->platform; }
  int32_t device_ordinal() const { return f_->ctx->device_ordinal; }
  // The platform stream (cudaStream_t, hipStream_t, cl_command_queue): a
  // device handler enqueues all its work there; the agent synchronises it
  // before sending results. Prefer the typed accessors below.
  template <typename T>
  T stream() const {
    return reinterpret_cast<T>(f_->ctx->stream);
  }
  FarcallStreamKind stream_kind() const {
    return static_cast<FarcallStreamKind>(f_->ctx->stream_kind);
  }
  // Typed streams, present when the platform's header was included before
  // this one; null when the call runs on another platform.
#if defined(CUDART_VERSION)
  cudaStream_t cuda_stream() const {
    return stream_kind() == FARCALL_STREAM_CUDA ? stream<cudaStream_t>() : nullptr;
  }
#endif
#if defined(HIP_VERSION_MAJOR)
  hipStream_t hip_stream() const {
    return stream_kind() == FARCALL_STREAM_HIP ? stream<hipStream_t>() : nullptr;
  }
#endif
#if defined(CL_VERSION_1_0)
  cl_command_queue opencl_queue() const {
    return stream_kind() == FARCALL_STREAM_OPENCL ? stream<cl_command_queue>() : nullptr;
  }
#endif
  bool cancelled() const { return f_->api->is_cancelled(f_->ctx) != 0; }
  // Waits up to `timeout_ns`; true as soon as the call is cancelled.
  bool WaitCancelled(int64_t timeout_ns) const {
    return f_->api->wait_cancelled(f_->ctx, timeout_ns) != 0;
  }

  const FarcallAttribute* FindAttr(std::string_view name) const {
    for (size_t i = 0; i < f_->num_attrs; ++i) {
      const FarcallAttribute& a = f_->attrs[i];
      if (std::string_view(a.name, a.name_size) == name) return &a;
    }
    return nullptr;
  }
  // Numeric attributes accept i64 or f64 values.
  std::optional<double> GetF64(std::string_view name) const {
    const FarcallAttribute* a = FindAttr(name);
    if (a == nullptr) return std::nullopt;
    if (a->type == FARCALL_ATTR_F64) return a->f64;
    if (a->type == FARCALL_ATTR_I64) return static_cast<double>(a->i64);
    return std::nullopt;
  }
  std::optional<int64_t> GetI64(std::string_view name) const {
    const FarcallAttribute* a = FindAttr(name);
    if (a == nullptr || a->type != FARCALL_ATTR_I64) return std::nullopt;
    return a->i64;
  }
  std::optional<bool> GetBool(std::string_view name) const {
    const FarcallAttribute* a = FindAttr(name);
    if (a == nullptr || a->type != FARCALL_ATTR_BOOL) return std::nullopt;
    return a->b != 0;
  }
  std::optional<std::string_view> GetStr(std::string_view name) const {
    const FarcallAttribute* a = FindAttr(name);
    if (a == nullptr || a->type != FARCALL_ATTR_STR) return std::nullopt;
    return std::string_view(a->str, a->str_size);
  }

  const FarcallCallFrame* raw() const { return f_; }

 private:
  static constexpr FarcallBuffer kNoBuffer = {
      sizeof(FarcallBuffer), FARCALL_DTYPE_INVALID, 0, nullptr, nullptr, 0, -1};
  const FarcallCallFrame* f_;
};

using HandlerFn = Status (*)(CallFrame&);

namespace internal {
// Turns a C++ handler into a FarcallHandlerFn; no exception escapes.
template <HandlerFn F>
FarcallError* Adapt(const FarcallCallFrame* frame) {
  Status s;
  try {
    CallFrame call(frame);
    s = F(call);
  } catch (const std::exception& e) {
    s = Internal(std::string("handler threw: ") + e.what());
  } catch (...) {
    s = Internal("handler threw a non-standard exception");
  }
  if (s.ok()) return nullptr;
  return frame->api->error_create(s.code(), s.message().data(), s.message().size());
}
}  // namespace internal

}  // namespace farcall::sdk

// Typed bindings: a handler's args, results and attributes checked before
// its body runs (FARCALL_BOUND_HANDLER).
#include "farcall/handler_binding.h"  // IWYU pragma: export

// A FarcallHandlerDef initialiser for a C++ handler function.
#define FARCALL_HANDLER_DEF(name, platform, traits, fn)                                     \
  FarcallHandlerDef {                                                                       \
    sizeof(FarcallHandlerDef), name, platform, traits, &::farcall::sdk::internal::Adapt<fn> \
  }

// Defines the plugin entry point over a list of FARCALL_HANDLER_DEFs.
#define FARCALL_PLUGIN(plugin_name, ...)                                                          \
  extern "C" __attribute__((visibility("default"))) const FarcallPlugin* FarcallPluginGet(void) { \
    static const FarcallHandlerDef kDefs[] = {__VA_ARGS__};                                       \
    static const FarcallPlugin kPlugin = {                                                        \
        sizeof(FarcallPlugin),                                                                    \
        {sizeof(FarcallApiVersion), FARCALL_API_MAJOR, FARCALL_API_MINOR},                        \
        plugin_name,                                                                              \
        sizeof(kDefs) / sizeof(kDefs[0]),                                                         \
        kDefs};                                                                                   \
    return &kPlugin;                                                                              \
  }

#endif  // FARCALL_HANDLER_H_
