// The agent side of the handler ABI: the FarcallApi that handlers call back
// into, cancellation, and invoking one handler with a prepared frame.
//
// Thread safety: HandlerApi() is immutable; a CancellationToken may be
// cancelled from any thread while a handler waits on it.
#ifndef FARCALL_DEVICE_AGENTS_HANDLER_RUNTIME_H_
#define FARCALL_DEVICE_AGENTS_HANDLER_RUNTIME_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "farcall/handler_api.h"

namespace farcall::agent {

// Set once when a call is cancelled or its deadline passes: the client's
// (through Cancel), or the agent's own cap (SetDeadline).
class CancellationToken {
 public:
  void Cancel();
  // The token counts as cancelled from `deadline` on.
  void SetDeadline(absl::Time deadline);
  bool cancelled() const;
  // Whether the SetDeadline deadline has passed.
  bool deadline_passed() const;
  // The caller's own deadline, when it set one. Only deadline() tells it:
  // the token is cancelled when gRPC cancels the call at that deadline (the
  // agent answering first would turn the caller's DEADLINE_EXCEEDED into
  // the handler's CANCELLED).
  void SetCallerDeadline(absl::Time deadline);
  // The sooner of both (InfiniteFuture when none): what a handler has.
  absl::Time deadline() const;
  // Waits up to `timeout`; true as soon as the token is cancelled.
  bool WaitFor(absl::Duration timeout) const;

 private:
  mutable absl::Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time deadline_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  absl::Time caller_deadline_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
};

// The services table handed to every handler. Static; never null.
const FarcallApi* HandlerApi();

// Converts an error made by HandlerApi()->error_create into a Status and
// frees it. nullptr is OK.
absl::Status ConsumeHandlerError(FarcallError* error);

// Everything needed to run one handler once. The vectors' elements and the
// memory they point to are owned by the caller and must outlive Invoke().
struct HandlerInvocation {
  std::string platform = "cpu";
  int32_t device_ordinal = 0;
  FarcallStreamKind stream_kind = FARCALL_STREAM_NONE;
  void* stream = nullptr;
  std::vector<FarcallBuffer> args;
  std::vector<FarcallBuffer> results;
  // The owners of each arg's and result's memory (may be null). An
  // in-process handler whose views of a buffer may outlive the call (a
  // Python array kept by the handler) holds its owner meanwhile, so that
  // the memory goes to no other call while it does.
  std::vector<std::shared_ptr<void>> arg_owners;
  std::vector<std::shared_ptr<void>> result_owners;
  std::vector<FarcallAttribute> attrs;
  const CancellationToken* cancel = nullptr;  // may be null: never cancelled
};

// The C ABI's structs for one call (farcall/handler_api.h), filled in one
// place. They point into `dims`, `data`, `name` and `value`, which must
// outlive the invocation.
FarcallBuffer MakeBuffer(int32_t dtype, const std::vector<int64_t>& dims, void* data,
                         uint64_t size_bytes, int64_t aliased_arg = -1);
FarcallAttribute MakeI64Attribute(std::string_view name, int64_t value);
FarcallAttribute MakeF64Attribute(std::string_view name, double value);
FarcallAttribute MakeBoolAttribute(std::string_view name, bool value);
FarcallAttribute MakeStrAttribute(std::string_view name, std::string_view value);

// Runs `fn` on the calling thread and returns its status.
absl::Status InvokeHandler(FarcallHandlerFn fn, const HandlerInvocation& inv);

}  // namespace farcall::agent

#endif  // FARCALL_DEVICE_AGENTS_HANDLER_RUNTIME_H_
