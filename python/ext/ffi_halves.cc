// The two halves of a call without aliases on the CPU backend, behind
// farcall.jax's _lower_in_halves. Built with ffi_handler.cc, when jaxlib's
// FFI headers were found.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "core/tensor_spec.h"
#include "python/ext/ffi_call.h"

namespace nb = nanobind;
namespace ffi = xla::ffi;

namespace farcall::python {
namespace {

// An asynchronous custom call keeps its operands' slices in use until it
// completes, and XLA:CPU runs a later op that writes into one of them only
// after that. Buffer assignment often hands a callback's operand slice to
// the very next op's output, so CpuCall's independent local work waited for
// the remote call. Calls without aliases and with a result of 8 bytes or
// more are therefore lowered as two custom calls (farcall.jax's
// _lower_in_halves): CpuStart (synchronous) copies the inputs, starts the
// call and writes its handle into the first 8 bytes of that result's
// buffer, so XLA may reuse the operands' slices at once; CpuDone
// (asynchronous) takes that buffer, aliased to the same result, and
// completes when the call ends, copying the results into XLA's buffers. The
// only slice CpuDone reads is its own result's, which no other op reuses
// while it lives.
struct StartedCall {
  absl::Mutex mu;
  bool ended ABSL_GUARDED_BY(mu) = false;
  absl::Status status ABSL_GUARDED_BY(mu);
  // Set by CpuDone when it comes before the end.
  std::function<void(const absl::Status&)> then ABSL_GUARDED_BY(mu);
  std::vector<std::unique_ptr<uint8_t[]>> inputs;  // copies of XLA's
  std::vector<std::unique_ptr<uint8_t[]>> results;
  std::vector<size_t> result_bytes;
  std::shared_ptr<RemoteCall> not_started;  // a quick call: CpuDone makes it
  absl::Time forget_after;                  // its deadline, and a minute

  void End(const absl::Status& s) {
    std::function<void(const absl::Status&)> next;
    {
      absl::MutexLock l(&mu);
      ended = true;
      status = s;
      next = std::move(then);
    }
    if (next) next(s);
  }
};

// Started calls by handle. A step that fails before its CpuDone runs leaves
// its call here: entries a minute past their deadline are dropped as others
// are added.
class StartedCalls {
 public:
  static uint64_t Add(std::shared_ptr<StartedCall> call) {
    StartedCalls& all = Get();
    absl::MutexLock l(&all.mu_);
    const absl::Time now = absl::Now();
    if (now >= all.next_sweep_) {
      for (auto it = all.calls_.begin(); it != all.calls_.end();) {
        if (it->second->forget_after < now) {
          // A quick call never made holds its RemoteCall, which holds it.
          it->second->not_started = nullptr;
          all.calls_.erase(it++);
        } else {
          ++it;
        }
      }
      all.next_sweep_ = now + absl::Seconds(10);
    }
    const uint64_t handle = ++all.last_;
    all.calls_.emplace(handle, std::move(call));
    return handle;
  }
  static std::shared_ptr<StartedCall> Take(uint64_t handle) {
    StartedCalls& all = Get();
    absl::MutexLock l(&all.mu_);
    auto it = all.calls_.find(handle);
    if (it == all.calls_.end()) return nullptr;
    std::shared_ptr<StartedCall> call = std::move(it->second);
    all.calls_.erase(it);
    return call;
  }

 private:
  static StartedCalls& Get() {
    static auto* all = new StartedCalls();  // never destroyed: threads outlive main
    return *all;
  }
  absl::Mutex mu_;
  uint64_t last_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time next_sweep_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::flat_hash_map<uint64_t, std::shared_ptr<StartedCall>> calls_ ABSL_GUARDED_BY(mu_);
};

// "CODE:D0,D1;CODE:" (farcall.jax): the results' dtypes (XLA's numbers, as
// the wire's) and dimensions.
absl::StatusOr<std::vector<TensorSpec>> ParseResultSpecs(absl::string_view text) {
  std::vector<TensorSpec> specs;
  for (absl::string_view one : absl::StrSplit(text, ';', absl::SkipEmpty())) {
    std::pair<absl::string_view, absl::string_view> cd = absl::StrSplit(one, ':');
    TensorSpec spec;
    int code = 0;
    if (!absl::SimpleAtoi(cd.first, &code)) {
      return absl::InvalidArgumentError("farcall: malformed results attribute.");
    }
    spec.dtype = static_cast<DType>(code);
    for (absl::string_view d : absl::StrSplit(cd.second, ',', absl::SkipEmpty())) {
      int64_t n = 0;
      if (!absl::SimpleAtoi(d, &n) || n < 0) {
        return absl::InvalidArgumentError("farcall: malformed results attribute.");
      }
      spec.dims.push_back(n);
    }
    specs.push_back(std::move(spec));
  }
  return specs;
}

ffi::Error CpuStart(ffi::RunId run, ffi::RemainingArgs args, ffi::RemainingRets rets,
                    std::string_view target, std::string_view handler, std::string_view platform,
                    std::string_view aliases, std::string_view attributes, double timeout,
                    bool has_side_effect, bool wait_for_ready, int64_t retries, double busy_poll,
                    std::string_view results,
                    int64_t /*call_site: keeps XLA from merging starts*/) {
  FfiCallAttrs attrs{target,  handler,         platform,       aliases, attributes,
                     timeout, has_side_effect, wait_for_ready, retries, busy_poll};
  auto call = std::make_shared<StartedCall>();
  std::vector<HostTensor> in, out;
  for (size_t i = 0; i < args.size(); ++i) {
    ffi::ErrorOr<ffi::AnyBuffer> b = args.get<ffi::AnyBuffer>(i);
    if (!b.has_value()) return b.error();
    const size_t bytes = b->size_bytes();
    call->inputs.emplace_back(new uint8_t[std::max<size_t>(bytes, 1)]);  // not zeroed
    if (bytes > 0) std::memcpy(call->inputs.back().get(), b->untyped_data(), bytes);
    in.push_back({SpecOf(*b), call->inputs.back().get(), bytes});
  }
  absl::StatusOr<std::vector<TensorSpec>> specs =
      ParseResultSpecs(absl::string_view(results.data(), results.size()));
  if (!specs.ok()) return ToFfiError(specs.status());
  for (TensorSpec& spec : *specs) {
    absl::StatusOr<int64_t> size = ByteSize(spec, "a result");
    if (!size.ok()) return ToFfiError(size.status());
    const size_t bytes = static_cast<size_t>(*size);
    call->results.emplace_back(new uint8_t[std::max<size_t>(bytes, 1)]);
    call->result_bytes.push_back(bytes);
    out.push_back({std::move(spec), call->results.back().get(), bytes});
  }
  const std::vector<int64_t> no_aliases(in.size(), -1);
  absl::StatusOr<PreparedCall> prepared = PrepareCall(attrs, in, out, no_aliases);
  if (!prepared.ok()) return ToFfiError(prepared.status());
  std::shared_ptr<RemoteCall> remote = prepared->call;
  call->forget_after = remote->deadline + absl::Minutes(1);
  // The call's own reference keeps the inputs and results alive until it
  // ends, whether or not CpuDone has come.
  remote->done = [call, p = *prepared](const absl::Status& s) {
    NoteDuration(p, s);
    call->End(s);
  };
  if (prepared->quick && !attrs.has_side_effect) {
    call->not_started = remote;  // CpuDone makes it on XLA's thread
  } else {
    StartInOrder(remote, attrs.has_side_effect, run.run_id, /*quick=*/false);
  }
  ffi::ErrorOr<ffi::Result<ffi::AnyBuffer>> handle = rets.get<ffi::AnyBuffer>(0);
  if (!handle.has_value()) return handle.error();
  if ((*handle)->size_bytes() < sizeof(uint64_t)) {
    return ffi::Error(ffi::ErrorCode::kInternal, "farcall: a call's handle has no room.");
  }
  const uint64_t id = StartedCalls::Add(std::move(call));
  std::memcpy((*handle)->untyped_data(), &id, sizeof(id));
  return ffi::Error::Success();
}

ffi::Future CpuDone(ffi::AnyBuffer handle, ffi::RemainingRets rets) {
  ffi::Promise promise;
  ffi::Future future(promise);
  uint64_t id = 0;
  if (handle.size_bytes() < sizeof(id)) {
    promise.SetError(
        ffi::Error(ffi::ErrorCode::kInternal, "farcall: a call's handle has no room."));
    return future;
  }
  std::memcpy(&id, handle.untyped_data(), sizeof(id));
  std::shared_ptr<StartedCall> call = StartedCalls::Take(id);
  if (call == nullptr) {
    promise.SetError(ffi::Error(ffi::ErrorCode::kInternal,
                                "farcall: a call's second half found no call started."));
    return future;
  }
  std::vector<std::pair<void*, size_t>> out;
  for (size_t o = 0; o < rets.size(); ++o) {
    ffi::ErrorOr<ffi::Result<ffi::AnyBuffer>> b = rets.get<ffi::AnyBuffer>(o);
    if (!b.has_value() || (*b)->size_bytes() != call->result_bytes[o]) {
      promise.SetError(
          ffi::Error(ffi::ErrorCode::kInternal,
                     "farcall: a call's results differ from those it was started with."));
      return future;
    }
    out.emplace_back((*b)->untyped_data(), (*b)->size_bytes());
  }
  // Runs once the call has ended: the results into XLA's buffers, which XLA
  // keeps until the future completes.
  auto finish = [promise, call, out = std::move(out)](const absl::Status& s) mutable {
    if (!s.ok()) {
      promise.SetError(ToFfiError(s));
      return;
    }
    for (size_t o = 0; o < out.size(); ++o) {
      if (out[o].second > 0) std::memcpy(out[o].first, call->results[o].get(), out[o].second);
    }
    promise.SetAvailable();
  };
  if (call->not_started != nullptr) {
    std::shared_ptr<RemoteCall> remote = std::move(call->not_started);
    remote->StartHere();  // ends the call (End) before it returns
  }
  absl::Status status;
  {
    absl::MutexLock l(&call->mu);
    if (!call->ended) {
      call->then = std::move(finish);
      return future;
    }
    status = call->status;
  }
  finish(status);
  return future;
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(FarcallXlaCpuStart, CpuStart,
                              BindCall(ffi::Ffi::Bind().Ctx<ffi::RunId>())
                                  .Attr<std::string_view>("results")
                                  .Attr<int64_t>("call_site"));
XLA_FFI_DEFINE_HANDLER_SYMBOL(FarcallXlaCpuDone, CpuDone,
                              ffi::Ffi::Bind().Arg<ffi::AnyBuffer>().RemainingRets());

void AddCpuHalves(nb::dict& halves) {
  halves["start"] =
      nb::capsule(reinterpret_cast<void*>(&FarcallXlaCpuStart), "xla._CUSTOM_CALL_TARGET");
  halves["done"] =
      nb::capsule(reinterpret_cast<void*>(&FarcallXlaCpuDone), "xla._CUSTOM_CALL_TARGET");
}

}  // namespace farcall::python
