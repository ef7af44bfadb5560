#include "device_agents/handler_runtime.h"

#include <algorithm>

#include <memory>
#include <string>

// Defined here, once per process: the only code that creates or frees one.
struct FarcallError {
  absl::StatusCode code;
  std::string message;
};

namespace farcall::agent {
namespace {

const CancellationToken* TokenOf(const FarcallContext* ctx) {
  return static_cast<const CancellationToken*>(ctx->agent_state);
}

FarcallError* ErrorCreate(int32_t code, const char* message, size_t size) {
  // A handler that reports OK or an out-of-range code through the error path
  // still failed; keep the failure visible rather than trusting the code.
  absl::StatusCode c =
      (code <= 0 || code > 16) ? absl::StatusCode::kUnknown : static_cast<absl::StatusCode>(code);
  return new FarcallError{c, std::string(message ? message : "", size)};
}

int32_t IsCancelled(const FarcallContext* ctx) {
  const CancellationToken* t = TokenOf(ctx);
  return t != nullptr && t->cancelled() ? 1 : 0;
}

int32_t WaitCancelled(const FarcallContext* ctx, int64_t timeout_ns) {
  const CancellationToken* t = TokenOf(ctx);
  if (t == nullptr) {
    absl::SleepFor(absl::Nanoseconds(timeout_ns));
    return 0;
  }
  return t->WaitFor(absl::Nanoseconds(timeout_ns)) ? 1 : 0;
}

const FarcallApi kApi = {
    sizeof(FarcallApi), {sizeof(FarcallApiVersion), FARCALL_API_MAJOR, FARCALL_API_MINOR},
    &ErrorCreate,       &IsCancelled,
    &WaitCancelled,
};

}  // namespace

void CancellationToken::Cancel() {
  absl::MutexLock l(&mu_);
  cancelled_ = true;
}

void CancellationToken::SetDeadline(absl::Time deadline) {
  absl::MutexLock l(&mu_);
  deadline_ = deadline;
}

bool CancellationToken::cancelled() const {
  absl::MutexLock l(&mu_);
  return cancelled_ || absl::Now() >= deadline_;
}

bool CancellationToken::deadline_passed() const {
  absl::MutexLock l(&mu_);
  return absl::Now() >= deadline_;
}

void CancellationToken::SetCallerDeadline(absl::Time deadline) {
  absl::MutexLock l(&mu_);
  caller_deadline_ = deadline;
}

absl::Time CancellationToken::deadline() const {
  absl::MutexLock l(&mu_);
  return std::min(deadline_, caller_deadline_);
}

bool CancellationToken::WaitFor(absl::Duration timeout) const {
  absl::MutexLock l(&mu_);
  mu_.AwaitWithDeadline(absl::Condition(&cancelled_), std::min(absl::Now() + timeout, deadline_));
  return cancelled_ || absl::Now() >= deadline_;
}

const FarcallApi* HandlerApi() { return &kApi; }

absl::Status ConsumeHandlerError(FarcallError* error) {
  if (error == nullptr) return absl::OkStatus();
  std::unique_ptr<FarcallError> owned(error);
  return absl::Status(owned->code, owned->message);
}

FarcallBuffer MakeBuffer(int32_t dtype, const std::vector<int64_t>& dims, void* data,
                         uint64_t size_bytes, int64_t aliased_arg) {
  FarcallBuffer b{};
  b.struct_size = sizeof(b);
  b.dtype = dtype;
  b.rank = static_cast<int64_t>(dims.size());
  b.dims = dims.data();
  b.data = data;
  b.size_bytes = size_bytes;
  b.aliased_arg = aliased_arg;
  return b;
}

namespace {
FarcallAttribute Named(std::string_view name, int32_t type) {
  FarcallAttribute a{};
  a.struct_size = sizeof(a);
  a.name = name.data();
  a.name_size = name.size();
  a.type = type;
  return a;
}
}  // namespace

FarcallAttribute MakeI64Attribute(std::string_view name, int64_t value) {
  FarcallAttribute a = Named(name, FARCALL_ATTR_I64);
  a.i64 = value;
  return a;
}

FarcallAttribute MakeF64Attribute(std::string_view name, double value) {
  FarcallAttribute a = Named(name, FARCALL_ATTR_F64);
  a.f64 = value;
  return a;
}

FarcallAttribute MakeBoolAttribute(std::string_view name, bool value) {
  FarcallAttribute a = Named(name, FARCALL_ATTR_BOOL);
  a.b = value ? 1 : 0;
  return a;
}

FarcallAttribute MakeStrAttribute(std::string_view name, std::string_view value) {
  FarcallAttribute a = Named(name, FARCALL_ATTR_STR);
  a.str = value.data();
  a.str_size = value.size();
  return a;
}

absl::Status InvokeHandler(FarcallHandlerFn fn, const HandlerInvocation& inv) {
  FarcallContext ctx{};
  ctx.struct_size = sizeof(ctx);
  ctx.platform = inv.platform.c_str();
  ctx.device_ordinal = inv.device_ordinal;
  ctx.stream_kind = inv.stream_kind;
  ctx.stream = inv.stream;
  ctx.agent_state = const_cast<CancellationToken*>(inv.cancel);

  FarcallCallFrame frame{};
  frame.struct_size = sizeof(frame);
  frame.api = &kApi;
  frame.ctx = &ctx;
  frame.num_args = inv.args.size();
  frame.args = inv.args.data();
  frame.num_results = inv.results.size();
  frame.results = inv.results.data();
  frame.num_attrs = inv.attrs.size();
  frame.attrs = inv.attrs.data();
  return ConsumeHandlerError(fn(&frame));
}

}  // namespace farcall::agent
