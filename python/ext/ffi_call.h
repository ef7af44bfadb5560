// What the XLA FFI handlers (ffi_handler.cc for cpu, ffi_cuda.cc for cuda)
// share: their attributes, decoded, and the remote call over host memory.
// Internal to the extension.
#ifndef FARCALL_PYTHON_EXT_FFI_CALL_H_
#define FARCALL_PYTHON_EXT_FFI_CALL_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/tensor_spec.h"
#include "farcall/client.h"
#include "nanobind/nanobind.h"
#include "xla/ffi/api/ffi.h"

namespace farcall::python {

// The custom call's attributes, as farcall/jax.py sets them.
struct FfiCallAttrs {
  std::string_view target;
  std::string_view handler;
  std::string_view platform;
  std::string_view aliases;     // "IN:OUT,..."
  std::string_view attributes;  // farcall.jax._encode_attrs
  double timeout = 60;
  bool has_side_effect = false;
  bool wait_for_ready = false;  // wait for the target within the timeout
  int64_t retries = 2;          // CallOptions::retries
  // CallOptions::busy_poll in seconds; below 0: the handler chooses (cpu:
  // PollFor; cuda: none).
  double busy_poll = -1;
};

// One tensor in host memory. An aliased output's `data` is its input's.
struct HostTensor {
  TensorSpec spec;
  void* data = nullptr;
  size_t bytes = 0;
};

// The spec of an XLA buffer (XLA's PrimitiveType numbers are the wire's).
TensorSpec SpecOf(const xla::ffi::AnyBuffer& b);

// Parses the aliases attribute: input index -> output index, in range.
absl::Status ParseAliases(std::string_view text, size_t n_in, size_t n_out,
                          std::vector<int64_t>* output_of_input);

// The call's request: `in` are sent, each output is written into its memory
// (an aliased one into its input's, which must be the same memory).
absl::StatusOr<CallRequest> RequestFor(const FfiCallAttrs& attrs, const std::vector<HostTensor>& in,
                                       const std::vector<HostTensor>& out,
                                       const std::vector<int64_t>& output_of_input);
// Its options (a call id for a call with side effects; the retries, which
// the client makes as core/retry_policy.h says; busy_poll when given; no
// timeout yet). A call whose result had begun to land in an aliased
// operand when it failed is not sent again (XLA's buffer no longer holds
// the operand): the step fails ABORTED, never goes on with other numbers.
CallOptions OptionsFor(const FfiCallAttrs& attrs);

// Calls the handler and waits for it (the cuda handler; the cpu one is
// asynchronous).
absl::Status CallRemote(const FfiCallAttrs& attrs, const std::vector<HostTensor>& in,
                        const std::vector<HostTensor>& out,
                        const std::vector<int64_t>& output_of_input);

// The status as an FFI error; JAX's runtime error puts the code's name in
// front ("NOT_FOUND: ...").
xla::ffi::Error ToFfiError(const absl::Status& s);

// One call, a blocking Client::Call (which makes the retries itself): on
// the calling thread (StartHere) or on a waiting thread (Start). `done`
// runs once, with its status.
struct RemoteCall : std::enable_shared_from_this<RemoteCall> {
  Client* client = nullptr;
  CallRequest request;
  CallOptions options;
  absl::Time deadline;
  std::function<void(const absl::Status&)> done;

  void Start();
  void StartHere();
};

// A call ready to start (its `done` still to set): `quick` when its
// handler's calls at its target lately ended within 500 us, so that it may
// wait on XLA's thread (busy_poll chosen to match); `recent` that moving
// average, `start` when it was made.
struct PreparedCall {
  std::shared_ptr<RemoteCall> call;
  std::atomic<int64_t>* recent = nullptr;
  absl::Time start;
  bool quick = false;
};
absl::StatusOr<PreparedCall> PrepareCall(const FfiCallAttrs& attrs,
                                         const std::vector<HostTensor>& in,
                                         const std::vector<HostTensor>& out,
                                         const std::vector<int64_t>& output_of_input);
// Folds a call that succeeded into its handler's moving average.
void NoteDuration(const PreparedCall& p, const absl::Status& s);

// Starts `call`: now, on this thread when `quick` and nothing is before it;
// else on a waiting thread. A call with side effects starts only once the
// previous one of the same execution (XLA's RunId `run`) has ended: XLA
// starts side-effecting custom calls in program order, but a call made in
// two halves (ffi_halves.cc) has ended only at its second, and XLA may
// start the next call before that. Wraps the call's `done`, so set it first.
void StartInOrder(const std::shared_ptr<RemoteCall>& call, bool has_side_effect, int64_t run,
                  bool quick);

// The two halves of a call without aliases on the CPU backend
// (ffi_halves.cc), as capsules for jax.ffi: "start" and "done".
void AddCpuHalves(nanobind::dict& halves);

// Binds what both handlers take after their own leading bindings: the
// operands, the results and FfiCallAttrs' attributes, in that order.
template <typename Binding>
auto BindCall(Binding&& b) {
  return std::forward<Binding>(b)
      .RemainingArgs()
      .RemainingRets()
      .template Attr<std::string_view>("target")
      .template Attr<std::string_view>("handler")
      .template Attr<std::string_view>("platform")
      .template Attr<std::string_view>("aliases")
      .template Attr<std::string_view>("attributes")
      .template Attr<double>("timeout")
      .template Attr<bool>("has_side_effect")
      .template Attr<bool>("wait_for_ready")
      .template Attr<int64_t>("retries")
      .template Attr<double>("busy_poll");
}

// Adds the cuda handler's capsule to `handlers` when built with CUDA.
void AddCudaFfiHandler(nanobind::dict& handlers);

}  // namespace farcall::python

#endif  // FARCALL_PYTHON_EXT_FFI_CALL_H_
