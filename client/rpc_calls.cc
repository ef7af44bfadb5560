#include "client/rpc_calls.h"

#include <atomic>
#include <chrono>
#include <optional>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "client/call_stop.h"
#include "client/polling_slot.h"
#include "client/ucx_exchange.h"
#include "core/capability.h"
#include "core/error_reason.h"
#include "core/tokens.h"
#include "core/wire/grpc_status.h"
#include "grpcpp/grpcpp.h"

namespace farcall::client_internal {
namespace {

constexpr char kNotDeliveredPayload[] = "type.farcall.dev/not-delivered";

// A failed call's status, marked when a result aliased to an arg had begun
// to land in the arg's memory (core/retry_policy.h): the call must not go
// again from those bytes. A call refused before any handler ran
// (DidNotRun) wrote nothing.
absl::StatusOr<CallResult> MarkLanded(absl::StatusOr<CallResult> r, const ResponseReader& reader,
                                      bool handler_may_have_run) {
  if (r.ok()) return r;
  std::optional<LandedResult> landed =
      reader.Landed(handler_may_have_run && !DidNotRun(r.status()));
  if (!landed.has_value()) return r;
  return WithLandedResult(r.status(), *landed);
}

// When a call's own timeout ran out on this client, gRPC says only
// "Deadline Exceeded": the caller gets the handler, the platform, the
// timeout and what the call was doing then. A server's own
// DEADLINE_EXCEEDED (an agent's limits, which end a call before its
// caller's deadline) keeps its message.
struct Timeout {
  absl::Duration timeout;
  absl::Time deadline;  // no later than gRPC's own for the call
  static Timeout Of(const CallOptions& options) {
    return {options.timeout, absl::Now() + options.timeout};
  }
};
absl::Status NamedDeadline(absl::Status s, const PreparedCall& call, const Timeout& t,
                           absl::string_view phase) {
  if (!absl::IsDeadlineExceeded(s) || absl::Now() < t.deadline) return s;
  const std::string platform = call.header.platforms_size() > 0 ? call.header.platforms(0) : "";
  absl::Status named = absl::DeadlineExceededError(
      absl::StrCat("the call of '", call.header.handler().substr(0, 128), "' on ", platform,
                   " did not end within its timeout of ",
                   // What an attempt had left (a hand-off to a thread first,
                   // or a retry, takes some), to the millisecond.
                   absl::FormatDuration(t.timeout >= absl::Milliseconds(1)
                                            ? absl::Ceil(t.timeout, absl::Milliseconds(1))
                                            : t.timeout),
                   ": it was ", phase, " (", s.message(), ")."));
  s.ForEachPayload([&named](absl::string_view url, const absl::Cord& payload) {
    named.SetPayload(url, payload);
  });
  return named;
}

// A finished RPC's outcome: its failure, or what `decode` makes of the
// answer, with the RPC that carried it. A UCX call's results are marked
// once its transfers ended (UnaryCall::OnDone).
template <typename Decode>
absl::StatusOr<CallResult> Conclude(const grpc::Status& status, const grpc::ClientContext& ctx,
                                    const PreparedCall& call, Rpc rpc, const ResponseReader& reader,
                                    Decode decode) {
  absl::StatusOr<CallResult> result;
  if (!status.ok()) {
    absl::Status s = FromGrpcStatus(status);
    if (call.direct && NeverReachedAgent(status, ctx)) MarkNotDelivered(s);
    result = std::move(s);
  } else {
    result = decode();
    if (result.ok()) {
      if (result->transport != Transport::kShm) result->transport = Transport::kGrpc;
      result->rpc = rpc;
      result->via_router = call.via_router;
    }
  }
  // After a failed call the agent may still be writing into the call's
  // staging region (a deadline or cancel ends the call here first): it must
  // never serve another call.
  if (!result.ok() && call.shm_region != nullptr) call.shm_region->reusable = false;
  if (call.ucx) return result;
  return MarkLanded(std::move(result), reader, /*handler_may_have_run=*/true);
}

// A unary call of raw frames that blocks the calling thread, on a
// completion queue of its own (the generic stub has no blocking form; the
// generated one would copy the tensors into protobuf messages). No gRPC
// thread takes part, so no hand-off to one and back. With `busy_poll`, the
// thread first polls for the answer (PollingSlot) and sleeps only if none
// came within that long.
grpc::Status BlockingRawUnary(grpc::GenericStub& stub, grpc::ClientContext& ctx,
                              const std::string& method, const grpc::ByteBuffer& request,
                              grpc::ByteBuffer* response, absl::Duration busy_poll) {
  grpc::CompletionQueue cq;
  std::unique_ptr<grpc::GenericClientAsyncResponseReader> call =
      stub.PrepareUnaryCall(&ctx, method, request, &cq);
  call->StartCall();
  grpc::Status status;
  call->Finish(response, &status, &cq);
  void* tag = nullptr;
  bool ok = false;
  bool answered = false;
  if (busy_poll > absl::ZeroDuration()) {
    PollingSlot slot;
    if (slot.held()) {
      // AsyncNext with a deadline already past reads the connection once
      // without waiting (and runs what it read: the call's end among it).
      const absl::Time until = absl::Now() + busy_poll;
      do {
        answered = cq.AsyncNext(&tag, &ok, std::chrono::system_clock::time_point()) ==
                   grpc::CompletionQueue::GOT_EVENT;
      } while (!answered && absl::Now() < until);
    }
  }
  if (!answered) cq.Next(&tag, &ok);  // the one event: the call's end
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  return status;
}

// A unary answer's results.
absl::StatusOr<CallResult> DecodeUnary(ResponseReader& reader, const grpc::ByteBuffer& response) {
  if (absl::Status s = reader.OnFrame(response); !s.ok()) return s;
  return reader.Finish();
}

// A streamed call: request frames out, one at a time; response frames in.
// A call object that deletes itself when its RPC is done (Unref from
// OnDone), unless its stop hook is cancelling it right then: gRPC may end
// the call inline, within TryCancel, and the object must outlive that.
class SelfDeleting {
 public:
  virtual ~SelfDeleting() = default;

 protected:
  // The stop hook's work: cancel `ctx` unless the call is already done.
  void Cancel(grpc::ClientContext& ctx) {
    int r = refs_.load();
    while (r > 0 && !refs_.compare_exchange_weak(r, r + 1)) {
    }
    if (r == 0) return;  // done: being deleted
    ctx.TryCancel();
    Unref();
  }
  void Unref() {
    if (refs_.fetch_sub(1) == 1) delete this;
  }

 private:
  std::atomic<int> refs_{1};  // OnDone's, and a running stop hook's
};

class StreamCall final : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>,
                         public SelfDeleting {
 public:
  // `closer`: the client's own CallStop (Client::Close), which stops the
  // call as options.stop does.
  StreamCall(PreparedCall call, const CallOptions& options, const CallCredentials& credentials,
             const CallStop* closer, CallCallback done)
      : call_(std::move(call)),
        completion_(std::make_shared<Completion>(std::move(done))),
        writer_(call_, options.chunk_bytes, completion_),
        reader_(call_),
        timeout_(Timeout::Of(options)) {
    ctx_.set_deadline(DeadlineAfter(options.timeout));
    ctx_.set_wait_for_ready(options.wait_for_ready);
    AddCredentials(ctx_, credentials);
    stop_hook_.emplace(options.stop.get(), closer, [this] { Cancel(ctx_); });
  }

  void Start(grpc::GenericStub& stub, const std::string& method) {
    if (!reader_.init_status().ok()) {
      completion_->Set(reader_.init_status());
      Unref();
      return;
    }
    stub.PrepareBidiStreamingCall(&ctx_, method, grpc::StubOptions(), this);
    StartRead(&in_);
    WriteNext();
    StartCall();
  }

  void OnWriteDone(bool ok) override {
    if (ok) WriteNext();  // else OnDone carries the reason
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;
    ++frames_read_;
    absl::Status s = reader_.OnFrame(in_);
    in_.Clear();
    if (!s.ok()) {
      absl::MutexLock l(&mu_);
      local_error_ = s;
      ctx_.TryCancel();
      return;
    }
    StartRead(&in_);
  }

  void OnDone(const grpc::Status& status) override {
    absl::Status local;
    {
      absl::MutexLock l(&mu_);
      local = local_error_;
    }
    absl::StatusOr<CallResult> result =
        Conclude(local.ok() ? status : ToGrpcStatus(local), ctx_, call_, Rpc::kStream, reader_,
                 [this] { return reader_.Finish(); });
    if (!result.ok()) {
      const char* phase = !inputs_sent_      ? "sending its inputs"
                          : frames_read_ > 1 ? "receiving its results"
                                             : "waiting for the handler's answer";
      result = NamedDeadline(result.status(), call_, timeout_, phase);
    }
    completion_->Set(std::move(result));
    Unref();  // the callback runs once gRPC has released our slices
  }

 private:
  void WriteNext() {
    out_.Clear();
    if (writer_.Next(&out_)) {
      StartWrite(&out_);
    } else {
      inputs_sent_ = true;
      StartWritesDone();
    }
  }

  PreparedCall call_;
  std::shared_ptr<Completion> completion_;
  RequestWriter writer_;
  ResponseReader reader_;
  const Timeout timeout_;
  // For NamedDeadline: the writes' and the reads' progress (gRPC runs the
  // reactor's reads and writes one at a time each; OnDone comes after both).
  std::atomic<bool> inputs_sent_{false};
  std::atomic<int> frames_read_{0};
  grpc::ClientContext ctx_;
  grpc::ByteBuffer in_;
  grpc::ByteBuffer out_;
  absl::Mutex mu_;
  absl::Status local_error_ ABSL_GUARDED_BY(mu_);
  std::optional<StopHook> stop_hook_;  // last: it goes first
};

// A unary call: one frame each way.
class UnaryCall : public SelfDeleting {
 public:
  // `closer`: as StreamCall's.
  UnaryCall(PreparedCall call, const CallOptions& options, const CallCredentials& credentials,
            const CallStop* closer, CallCallback done, const UcxRoute& ucx = {})
      : call_(std::move(call)),
        completion_(std::make_shared<Completion>(std::move(done))),
        reader_(call_),
        timeout_(Timeout::Of(options)) {
    ctx_.set_deadline(DeadlineAfter(options.timeout));
    ctx_.set_wait_for_ready(options.wait_for_ready);
    AddCredentials(ctx_, credentials);
    stop_hook_.emplace(options.stop.get(), closer, [this] { Cancel(ctx_); });
    if (ucx.worker != nullptr && reader_.init_status().ok()) {
      exchange_ = UcxExchange::Start(*ucx.worker, call_, ucx.agent_address, reader_.result_data(),
                                     [this] { ctx_.TryCancel(); });
    }
    RequestWriter writer(call_, 0, completion_);
    writer.Next(&request_);
  }

  void Start(grpc::GenericStub& stub, const std::string& method) {
    if (!reader_.init_status().ok()) {
      completion_->Set(reader_.init_status());
      Unref();
      return;
    }
    stub.UnaryCall(&ctx_, method, grpc::StubOptions(), &request_, &response_,
                   [this](grpc::Status s) { OnDone(s); });
  }

 private:
  void OnDone(const grpc::Status& status) {
    absl::StatusOr<CallResult> r = Conclude(status, ctx_, call_, Rpc::kUnary, reader_,
                                            [this] { return DecodeUnary(reader_, response_); });
    // The results land before the agent answers, but the last piece may
    // still be on its way here. Until the agent asked for the args, no
    // handler ran.
    if (exchange_ != nullptr) {
      r = MarkLanded(exchange_->Conclude(std::move(r), timeout_.deadline), reader_,
                     exchange_->args_asked() && !exchange_->args_failed());
    }
    if (!r.ok()) r = NamedDeadline(r.status(), call_, timeout_, "waiting for its answer");
    completion_->Set(std::move(r));
    Unref();  // the callback runs once gRPC has released our slices
  }

  PreparedCall call_;
  std::shared_ptr<Completion> completion_;
  ResponseReader reader_;
  const Timeout timeout_;
  std::shared_ptr<UcxExchange> exchange_;
  grpc::ClientContext ctx_;
  grpc::ByteBuffer request_;
  grpc::ByteBuffer response_;
  std::optional<StopHook> stop_hook_;  // last: it goes first
};

}  // namespace

std::chrono::system_clock::time_point DeadlineAfter(absl::Duration d) {
  return std::chrono::system_clock::now() + absl::ToChronoNanoseconds(d);
}

void AddCredentials(grpc::ClientContext& ctx, const CallCredentials& c) {
  if (!c.authorization.empty()) ctx.AddMetadata(kAuthorizationKey, c.authorization);
  if (!c.capability.empty()) ctx.AddMetadata(kCapabilityMetadataKey, c.capability);
}

void MarkNotDelivered(absl::Status& s) { s.SetPayload(kNotDeliveredPayload, absl::Cord()); }
bool NotDelivered(const absl::Status& s) { return s.GetPayload(kNotDeliveredPayload).has_value(); }
void ClearNotDelivered(absl::Status& s) { s.ErasePayload(kNotDeliveredPayload); }

void StartUnaryCall(const RpcTarget& target, PreparedCall call, const CallOptions& options,
                    const CallCredentials& credentials, CallCallback done, const UcxRoute& ucx) {
  (new UnaryCall(std::move(call), options, credentials, target.closer, std::move(done), ucx))
      ->Start(*target.stub, target.method);
}

void StartStreamCall(const RpcTarget& target, PreparedCall call, const CallOptions& options,
                     const CallCredentials& credentials, CallCallback done) {
  (new StreamCall(std::move(call), options, credentials, target.closer, std::move(done)))
      ->Start(*target.stub, target.method);
}

absl::StatusOr<CallResult> BlockingUnaryCall(const RpcTarget& target, const PreparedCall& call,
                                             const CallOptions& options,
                                             const CallCredentials& credentials) {
  ResponseReader reader(call);
  if (!reader.init_status().ok()) return reader.init_status();
  const Timeout timeout = Timeout::Of(options);
  absl::Notification released;
  absl::StatusOr<CallResult> out;
  {
    // The request refers to the caller's memory; return only once gRPC has
    // let go of it, even when the call failed.
    auto completion = std::make_shared<Completion>([&](absl::StatusOr<CallResult> r) {
      out = std::move(r);
      released.Notify();
    });
    grpc::ClientContext ctx;
    ctx.set_deadline(DeadlineAfter(options.timeout));
    ctx.set_wait_for_ready(options.wait_for_ready);
    AddCredentials(ctx, credentials);
    StopHook hook(options.stop.get(), target.closer, [&] { ctx.TryCancel(); });
    grpc::ByteBuffer request_frame, response_frame;
    RequestWriter(call, 0, completion).Next(&request_frame);
    grpc::Status s = BlockingRawUnary(*target.stub, ctx, target.method, request_frame,
                                      &response_frame, options.busy_poll);
    absl::StatusOr<CallResult> r = Conclude(s, ctx, call, Rpc::kUnary, reader,
                                            [&] { return DecodeUnary(reader, response_frame); });
    if (!r.ok()) r = NamedDeadline(r.status(), call, timeout, "waiting for its answer");
    completion->Set(std::move(r));
  }
  released.WaitForNotification();
  return out;
}

absl::StatusOr<CallResult> Await(const std::function<void(CallCallback)>& start) {
  absl::Notification done;
  absl::StatusOr<CallResult> result;
  start([&](absl::StatusOr<CallResult> r) {
    result = std::move(r);
    done.Notify();
  });
  done.WaitForNotification();
  return result;
}

}  // namespace farcall::client_internal
