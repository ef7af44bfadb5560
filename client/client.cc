#include "farcall/client.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "client/call_codec.h"
#include "client/call_stop.h"
#include "client/lookaside.h"
#include "client/run_after.h"
#include "core/capability.h"
#include "core/error_reason.h"
#include "core/status_macros.h"
#include "core/tokens.h"
#include "core/wire/grpc_status.h"
#include "core/wire/protocol.h"
#include "core/wire/security.h"
#include "farcall/v1/farcall.grpc.pb.h"
#include "grpc/grpc.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#ifdef FARCALL_WITH_UCX
#include "client/ucx_exchange.h"
#endif

namespace farcall {
namespace {

// A call's args and results in bytes, summed without overflow (sizes come
// from the caller's specs).
// `total` plus `sizes`, saturating: sizes come from the caller's specs.
int64_t SaturatingSum(const std::vector<int64_t>& sizes, int64_t total = 0) {
  for (int64_t b : sizes) total = b > INT64_MAX - total ? INT64_MAX : total + b;
  return total;
}
int64_t TensorBytes(const client_internal::PreparedCall& call) {
  return SaturatingSum(call.validated.result_bytes, SaturatingSum(call.validated.arg_bytes));
}

// Whether any of a call's args lies in the caller's shared buffers.
bool ArgsInSharedBuffers(const client_internal::PreparedCall& call,
                         client_internal::ShmChannel& channel) {
  for (size_t i = 0; i < call.args.size(); ++i) {
    uint64_t offset = 0;
    if (channel.Locate(call.args[i].data(), call.validated.arg_bytes[i], &offset) != nullptr) {
      return true;
    }
  }
  return false;
}

using client_internal::Completion;
using client_internal::PreparedCall;
using client_internal::RequestWriter;
using client_internal::ResponseReader;

std::chrono::system_clock::time_point DeadlineAfter(absl::Duration d) {
  return std::chrono::system_clock::now() + absl::ToChronoNanoseconds(d);
}

// What a call presents to its target: the caller's token ("Bearer TOKEN"),
// or, to an agent a router named, the capability the router minted for
// this caller there (then never the token).
struct CallCredentials {
  std::string authorization;
  std::string capability;
};

void AddCredentials(grpc::ClientContext& ctx, const CallCredentials& c) {
  if (!c.authorization.empty()) ctx.AddMetadata(kAuthorizationKey, c.authorization);
  if (!c.capability.empty()) ctx.AddMetadata(kCapabilityMetadataKey, c.capability);
}

// A finished RPC's outcome: its failure, or what `decode` makes of the
// answer, with the RPC that carried it.
template <typename Decode>
absl::StatusOr<CallResult> Conclude(const grpc::Status& status, const grpc::ClientContext& ctx,
                                    const PreparedCall& call, Rpc rpc, Decode decode) {
  absl::StatusOr<CallResult> result;
  if (!status.ok()) {
    absl::Status s = FromGrpcStatus(status);
    if (call.direct && NeverReachedAgent(status, ctx)) client_internal::MarkNotDelivered(s);
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
  return result;
}

// Whether the target is an agent or a router: the method paths differ.
enum class Service { kUnknown, kAgent, kRouter };

// A unary call of raw frames that blocks the calling thread, on a
// completion queue of its own (the generic stub has no blocking form; the
// generated one would copy the tensors into protobuf messages). No gRPC
// thread takes part, so no hand-off to one and back.
grpc::Status BlockingRawUnary(grpc::GenericStub& stub, grpc::ClientContext& ctx,
                              const std::string& method, const grpc::ByteBuffer& request,
                              grpc::ByteBuffer* response) {
  grpc::CompletionQueue cq;
  std::unique_ptr<grpc::GenericClientAsyncResponseReader> call =
      stub.PrepareUnaryCall(&ctx, method, request, &cq);
  call->StartCall();
  grpc::Status status;
  call->Finish(response, &status, &cq);
  void* tag = nullptr;
  bool ok = false;
  cq.Next(&tag, &ok);  // the one event: the call's end
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
        reader_(call_) {
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
        Conclude(local.ok() ? status : ToGrpcStatus(local), ctx_, call_, Rpc::kStream,
                 [this] { return reader_.Finish(); });
    completion_->Set(std::move(result));
    Unref();  // the callback runs once gRPC has released our slices
  }

 private:
  void WriteNext() {
    out_.Clear();
    if (writer_.Next(&out_)) {
      StartWrite(&out_);
    } else {
      StartWritesDone();
    }
  }

  PreparedCall call_;
  std::shared_ptr<Completion> completion_;
  RequestWriter writer_;
  ResponseReader reader_;
  grpc::ClientContext ctx_;
  grpc::ByteBuffer in_;
  grpc::ByteBuffer out_;
  absl::Mutex mu_;
  absl::Status local_error_ ABSL_GUARDED_BY(mu_);
  std::optional<client_internal::StopHook> stop_hook_;  // last: it goes first
};

// Whether a call over UCX failed because its args could not reach the agent
// (so the handler did not run, and the call may go again another way).
bool UcxInputsFailed(const absl::StatusOr<CallResult>& r) {
  return !r.ok() && ReasonOf(r.status()) == ErrorReason::kInputsNotDelivered;
}

// `options` for a call that goes again over gRPC, within what is left
// before `deadline` (none left: it ends DEADLINE_EXCEEDED at once).
CallOptions WithTimeLeft(CallOptions options, absl::Time deadline) {
  options.timeout = std::max(deadline - absl::Now(), absl::ZeroDuration());
  return options;
}

CallOptions OverGrpc(CallOptions options, absl::Time deadline) {
  options.transport = Transport::kGrpc;
  return WithTimeLeft(std::move(options), deadline);
}

// Router rollouts: a router draining for shutdown refuses new calls
// (ErrorReason::kRouterDraining) for about a second, then sends its clients
// GOAWAY (core/wire/grpc_server.h), and the channel reconnects to another
// router (another address of the target, or the Service's next pod). A
// refused call, and a call without side effects whose router could not be
// reached meanwhile (UNAVAILABLE that no server marked), goes again after
// each of these waits while its deadline allows: 3.1 s in all, which
// outlasts the refusals and a reconnect (back-off at most 1 s). A call a
// server ended with CANCELLED (AsCallerSees: UNAVAILABLE) counts as one
// that did not reach it.
constexpr absl::Duration kRouterRetryWaits[] = {absl::Milliseconds(100), absl::Milliseconds(200),
                                                absl::Milliseconds(400), absl::Milliseconds(800),
                                                absl::Milliseconds(1600)};

// A call's outcome as its caller gets it. CANCELLED means the caller
// stopped the call (`stopped`: CallOptions::stop, Client::Close): a server
// that ended the call by going away (its drain ran out, it crashed) is
// UNAVAILABLE.
absl::StatusOr<CallResult> AsCallerSees(absl::StatusOr<CallResult> r, bool stopped) {
  if (r.ok()) return r;
  if (stopped) return client_internal::StoppedStatus();
  if (!absl::IsCancelled(r.status())) return r;
  return absl::UnavailableError(
      "the server ended the call before it answered (it shut down or went away); the call may "
      "have run.");
}

absl::Status ClosedStatus() { return absl::FailedPreconditionError("this client is closed."); }

bool SendToAnotherRouter(const absl::StatusOr<CallResult>& r, const CallRequest& request,
                         bool to_router) {
  if (r.ok()) return false;
  const ErrorReason reason = ReasonOf(r.status());
  if (reason == ErrorReason::kRouterDraining) return true;
  return to_router && !request.has_side_effect && absl::IsUnavailable(r.status()) &&
         reason == ErrorReason::kUnspecified && TracebackOf(r.status()).empty();
}

// How a unary call's tensors travel over UCX: the process's worker and the
// agent's address (a null worker: not over UCX).
struct UcxRoute {
  void* worker = nullptr;  // ucx::Worker
  std::string agent_address;
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
        deadline_(absl::Now() + options.timeout) {
    ctx_.set_deadline(DeadlineAfter(options.timeout));
    ctx_.set_wait_for_ready(options.wait_for_ready);
    AddCredentials(ctx_, credentials);
    stop_hook_.emplace(options.stop.get(), closer, [this] { Cancel(ctx_); });
#ifdef FARCALL_WITH_UCX
    if (ucx.worker != nullptr && reader_.init_status().ok()) {
      exchange_ = client_internal::UcxExchange::Start(*static_cast<ucx::Worker*>(ucx.worker), call_,
                                                      ucx.agent_address, reader_.result_data(),
                                                      [this] { ctx_.TryCancel(); });
    }
#endif
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
    absl::StatusOr<CallResult> r = Conclude(status, ctx_, call_, Rpc::kUnary,
                                            [this] { return DecodeUnary(reader_, response_); });
#ifdef FARCALL_WITH_UCX
    // The results land before the agent answers, but the last piece may
    // still be on its way here.
    if (exchange_ != nullptr) r = exchange_->Conclude(std::move(r), deadline_);
#endif
    completion_->Set(std::move(r));
    Unref();  // the callback runs once gRPC has released our slices
  }

  PreparedCall call_;
  std::shared_ptr<Completion> completion_;
  ResponseReader reader_;
  const absl::Time deadline_;
#ifdef FARCALL_WITH_UCX
  std::shared_ptr<client_internal::UcxExchange> exchange_;
#endif
  grpc::ClientContext ctx_;
  grpc::ByteBuffer request_;
  grpc::ByteBuffer response_;
  std::optional<client_internal::StopHook> stop_hook_;  // last: it goes first
};

// One channel per target for the life of the process, shared by every Client.
// Clients to one target then share connections. It also works around a gRPC
// 1.51 race: when the last channel that made callback calls goes away, gRPC
// releases its callback completion queue, and re-creating it for the next
// channel can double-free (seen under ASan in the conformance suite).
// Keyed by the target and the TLS files: clients that reach one target the
// same way share it.
// The longest wait between attempts to reach a target that went away.
constexpr absl::Duration kReconnectBackoff = absl::Seconds(1);

absl::StatusOr<std::shared_ptr<grpc::Channel>> SharedChannel(const std::string& target,
                                                             const ClientOptions& options) {
  static absl::Mutex mu(absl::kConstInit);
  static auto* channels =
      new std::map<std::string, std::shared_ptr<grpc::Channel>>();  // never freed
  const std::string key = absl::StrCat(target, "\n", options.tls_ca, "\n", options.tls_cert, "\n",
                                       options.tls_key, "\n", options.tls_server_name);
  absl::MutexLock l(&mu);
  std::shared_ptr<grpc::Channel>& c = (*channels)[key];
  if (c == nullptr) {
    absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> creds =
        ChannelCredentials({options.tls_cert, options.tls_key, options.tls_ca});
    if (!creds.ok()) {
      channels->erase(key);
      return creds.status();
    }
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(-1);
    args.SetMaxSendMessageSize(-1);
    // A target that went away (an agent restarting) is tried again at most
    // kReconnectBackoff apart, so that it is reached within that of its
    // return (gRPC's own back-off grows to 2 minutes).
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
                static_cast<int>(absl::ToInt64Milliseconds(kReconnectBackoff) / 4));
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS,
                static_cast<int>(absl::ToInt64Milliseconds(kReconnectBackoff)));
    if (!options.tls_server_name.empty()) args.SetSslTargetNameOverride(options.tls_server_name);
    c = grpc::CreateCustomChannel(target, *creds, args);
  }
  return c;
}

// The wire's AgentInfo as the public API's struct.
AgentDescription DescriptionFromProto(const v1::AgentInfo& info) {
  AgentDescription d;
  d.agent_id = info.agent_id();
  d.platform = info.platform();
  d.version = info.version();
  for (const v1::DeviceInfo& dev : info.devices()) {
    d.devices.push_back({dev.ordinal(), dev.name(), dev.memory_bytes()});
  }
  for (const v1::HandlerInfo& h : info.handlers()) {
    d.handlers.push_back({h.name(), h.command_buffer_compatible(), h.source()});
  }
  d.max_call_bytes = info.max_call_bytes();
  d.shm_socket = info.shm_socket();
  d.shm_regions = info.shm_regions();
  d.offers_ucx = !info.ucx_address().empty();
  d.calls_total = info.calls_total();
  d.failed_calls_total = info.failed_calls_total();
  d.inflight_calls = info.inflight_calls();
  return d;
}

}  // namespace

struct Client::Impl {
  std::shared_ptr<grpc::Channel> channel;
  CallStop closer;  // stopped by Close()
  ClientOptions options;
  std::string authorization;  // "Bearer TOKEN", or empty
  bool direct = false;        // MarkDirect
  // For a lookaside agent's client: the capability for a handler, or empty
  // (then the token goes). Set before the client is shared.
  std::function<std::string(const std::string& handler)> capability_source;

  // A non-call RPC's context: the token, when there is one.
  void Prepare(grpc::ClientContext& ctx) const { AddCredentials(ctx, {authorization, ""}); }
  CallCredentials CredentialsFor(const std::string& handler) const {
    if (capability_source) {
      std::string capability = capability_source(handler);
      if (!capability.empty()) return {"", std::move(capability)};
    }
    return {authorization, ""};
  }
  std::unique_ptr<grpc::GenericStub> generic;
  std::unique_ptr<v1::Agent::Stub> agent;
  std::unique_ptr<v1::Router::Stub> router;
  std::string target;
  absl::Mutex mu;
  Service service ABSL_GUARDED_BY(mu) = Service::kUnknown;
  std::string shm_socket ABSL_GUARDED_BY(mu);  // what the agent offers
  bool shm_tried ABSL_GUARDED_BY(mu) = false;
  std::shared_ptr<client_internal::ShmChannel> shm ABSL_GUARDED_BY(mu);
  // After a failed channel, when to try again, and the wait after that.
  absl::Time shm_retry_at ABSL_GUARDED_BY(mu) = absl::InfinitePast();
  absl::Duration shm_backoff ABSL_GUARDED_BY(mu) = absl::Seconds(1);
  // The agent's UCX worker address (empty: it offers none), and when to
  // use it again after UCX failed this client.
  std::string ucx_address ABSL_GUARDED_BY(mu);
  absl::Time ucx_retry_at ABSL_GUARDED_BY(mu) = absl::InfinitePast();
  absl::Duration ucx_backoff ABSL_GUARDED_BY(mu) = absl::Seconds(1);
  // For a router: the agents it names are called directly.
  std::shared_ptr<client_internal::Lookaside> lookaside ABSL_GUARDED_BY(mu);

  // Whether the target answered as a router (false before it answered).
  bool IsRouter() {
    absl::MutexLock l(&mu);
    return service == Service::kRouter;
  }

  std::shared_ptr<client_internal::Lookaside> Lookaside() {
    absl::MutexLock l(&mu);
    if (lookaside == nullptr) {
      lookaside =
          std::make_shared<client_internal::Lookaside>(target, options, channel, authorization);
    }
    return lookaside;
  }

  // The agent's shared-memory channel, connected on first use; null when the
  // target is not a local agent offering one (then calls use gRPC alone).
  // A channel whose agent went away (a restart) is dropped: this call goes
  // over gRPC, and the next one asks the agent afresh for its socket.
  std::shared_ptr<client_internal::ShmChannel> SharedMemory() {
    absl::MutexLock l(&mu);
    if (shm != nullptr && !shm->Alive()) {
      shm.reset();
      shm_tried = false;
      service = Service::kUnknown;  // Describe again: the socket's name changes
      return nullptr;
    }
    if (!shm_tried && absl::Now() >= shm_retry_at) {
      shm_tried = true;
      if (service == Service::kAgent && !shm_socket.empty() && IsLocal(target)) {
        auto c = client_internal::ShmChannel::Connect(shm_socket);
        if (c.ok()) {
          shm = *std::move(c);
        } else {
          BackOffLocked();
        }
      }
    }
    return shm;
  }

  // The channel failed (the agent refused this client's memory, or the
  // socket broke): calls go over gRPC, and the channel is tried again later,
  // a little later each time it fails.
  void DisableSharedMemory() {
    absl::MutexLock l(&mu);
    shm.reset();
    BackOffLocked();
  }

  void BackOffLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    shm_tried = false;
    shm_retry_at = absl::Now() + shm_backoff;
    shm_backoff = std::min(shm_backoff * 2, absl::Minutes(1));
    service = Service::kUnknown;
  }

  // The agent's UCX address; unless `forced`, none while UCX failed this
  // client a moment ago.
  std::string UcxAddress(bool forced) {
    absl::MutexLock l(&mu);
    return forced || absl::Now() >= ucx_retry_at ? ucx_address : std::string();
  }

  // Whether a call to this agent goes over UCX: when asked (kUcx, or an error
  // if it cannot), or by itself (kAuto, no RPC shape asked) for calls of at
  // least ucx_min_bytes whose agent offers UCX.
  absl::StatusOr<UcxRoute> ChooseUcx(const PreparedCall& call, const CallOptions& o) {
    const bool forced = o.transport == Transport::kUcx;
    if (!forced) {
      if (o.transport != Transport::kAuto || o.rpc != Rpc::kAuto) return UcxRoute{};
      if (TensorBytes(call) < o.ucx_min_bytes) return UcxRoute{};
    }
#ifdef FARCALL_WITH_UCX
    UcxRoute route;
    route.agent_address = UcxAddress(forced);
    if (route.agent_address.empty()) {
      if (!forced) return route;
      return absl::FailedPreconditionError(
          "transport ucx: the agent offers no UCX data plane (it was built without UCX, serves "
          "a GPU platform, was started with --transports without ucx, or requires TLS or "
          "tokens without --allow_ucx_with_tls).");
    }
    absl::StatusOr<ucx::Worker*> w = client_internal::ProcessUcxWorker(options.ucx_transports);
    if (!w.ok()) {
      if (forced) {
        return absl::FailedPreconditionError(absl::StrCat(
            "transport ucx: UCX cannot start in this process: ", w.status().message()));
      }
      BackOffUcx();
      return UcxRoute{};
    }
    route.worker = *w;
    return route;
#else
    return UcxRoute{};
#endif
  }
  // UCX failed before a call ran (an agent whose worker cannot be reached
  // from here, say): calls go over gRPC for a while, longer each time.
  void BackOffUcx() {
    absl::MutexLock l(&mu);
    ucx_retry_at = absl::Now() + ucx_backoff;
    ucx_backoff = std::min(ucx_backoff * 2, absl::Minutes(5));
  }

  // Shared memory serves only calls over loopback TCP (the agent checks the
  // caller's user on each call).
  static bool IsLocal(const std::string& t) { return client_internal::IsLoopbackTarget(t); }

  // Learns once whether the target is an agent (Describe answers) or a
  // router (Describe is unimplemented there). Asked with the credentials of
  // a call of `handler` (a lookaside agent's client holds capabilities
  // alone).
  absl::StatusOr<Service> GetService(absl::Duration timeout, bool wait_for_ready = false,
                                     const std::string& handler = "") {
    {
      absl::MutexLock l(&mu);
      if (service != Service::kUnknown) return service;
    }
    grpc::ClientContext ctx;
    ctx.set_deadline(DeadlineAfter(timeout));
    ctx.set_wait_for_ready(wait_for_ready);
    AddCredentials(ctx, CredentialsFor(handler));
    v1::AgentInfo info;
    grpc::Status s = agent->Describe(&ctx, v1::DescribeRequest(), &info);
    Service found;
    if (s.ok()) {
      found = Service::kAgent;
      absl::MutexLock l(&mu);
      shm_socket = info.shm_socket();
      ucx_address = info.ucx_address();
    } else if (s.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
      found = Service::kRouter;
    } else {
      return FromGrpcStatus(s);
    }
    absl::MutexLock l(&mu);
    service = found;
    return found;
  }
};

Client::Client(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(const std::string& target,
                                                        const ClientOptions& options) {
  if (target.empty()) return absl::InvalidArgumentError("empty target address.");
  // Keep gRPC initialised for the life of the process. Otherwise the last
  // client to go away shuts gRPC down while its callback thread may still be
  // polling, and gRPC 1.51 can crash when the next client starts it again.
  static const bool kGrpcInitialised = [] {
    grpc_init();
    return true;
  }();
  (void)kGrpcInitialised;
  auto impl = std::make_shared<Impl>();
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = SharedChannel(target, options);
  if (!channel.ok()) return channel.status();
  impl->channel = *std::move(channel);
  if (!options.token.empty()) {
    if (!client_internal::TokenMayGo(target, options)) {
      return absl::InvalidArgumentError(
          absl::StrCat("the token would travel in clear to ", target,
                       ", which is not this host: use TLS (tls_ca), or allow_insecure_tokens (CLI "
                       "--allow_insecure_tokens) where the network is trusted."));
    }
    impl->authorization = absl::StrCat(kBearerPrefix, options.token);
  }
  impl->target = target;
  impl->options = options;
  impl->generic = std::make_unique<grpc::GenericStub>(impl->channel);
  impl->agent = v1::Agent::NewStub(impl->channel);
  impl->router = v1::Router::NewStub(impl->channel);
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

// What a call needs before it goes out: its frames, and which RPC.
struct Client::Plan {
  PreparedCall prepared;
  bool unary = false;
  std::string method;
  UcxRoute ucx;  // set when the tensors go over UCX
  // Set for a router's calls that go to an agent directly: the rest of the
  // plan is then that agent's client's.
  std::shared_ptr<client_internal::Lookaside> lookaside;
};

void Client::MarkDirect() { impl_->direct = true; }

void Client::SetCapabilitySource(std::function<std::string(const std::string& handler)> source) {
  impl_->capability_source = std::move(source);
}

bool Client::Connected(absl::Duration wait) {
  if (impl_->channel->GetState(/*try_to_connect=*/true) == GRPC_CHANNEL_READY) return true;
  return wait > absl::ZeroDuration() && impl_->channel->WaitForConnected(DeadlineAfter(wait));
}

absl::StatusOr<Client::Plan> Client::MakePlan(Impl& impl, const CallRequest& request,
                                              const CallOptions& options) {
  absl::StatusOr<PreparedCall> prepared = client_internal::Prepare(request, options);
  if (!prepared.ok()) return prepared.status();
  absl::StatusOr<Service> service =
      impl.GetService(options.timeout, options.wait_for_ready, request.handler);
  if (!service.ok()) {
    absl::Status s = service.status();
    if (impl.direct && absl::IsUnavailable(s)) client_internal::MarkNotDelivered(s);
    return s;
  }
  Plan plan;
  if (*service == Service::kRouter && !options.via_router && options.validate_locally &&
      request.platforms.empty()) {
    plan.lookaside = impl.Lookaside();
    return plan;
  }
  if (options.transport == Transport::kUcx) {
#ifndef FARCALL_WITH_UCX
    return absl::FailedPreconditionError(
        "transport ucx: this build of farcall has no UCX data plane; use auto, grpc or shm.");
#endif
    if (options.rpc == Rpc::kStream) {
      return absl::FailedPreconditionError(
          "transport ucx: a UCX call goes as a unary Call (only its header crosses gRPC); use "
          "rpc auto or unary.");
    }
    if (*service == Service::kRouter) {
      return absl::FailedPreconditionError(
          "transport ucx: this call goes through the router (via_router), which carries its "
          "tensors itself; UCX reaches only agents called directly.");
    }
  }
  plan.unary = options.rpc == Rpc::kUnary;
  if (options.rpc == Rpc::kAuto) {
    // Well under the servers' 64 MiB message limit, whatever chunk_bytes is.
    const int64_t unary_limit = std::min<int64_t>(options.chunk_bytes, int64_t{32} << 20);
    plan.unary = SaturatingSum(prepared->validated.arg_bytes) <= unary_limit &&
                 SaturatingSum(prepared->validated.result_bytes) <= unary_limit;
  }
  const bool want_shm =
      options.transport == Transport::kShm ||
      (options.transport == Transport::kAuto && options.allow_shm && options.rpc == Rpc::kAuto);
  std::shared_ptr<client_internal::ShmChannel> shm = want_shm ? impl.SharedMemory() : nullptr;
  // Small calls stay on gRPC: staging and the region's bookkeeping cost
  // more than one message each way saves for them. Not those with an arg in
  // the caller's shared buffers, which go by reference.
  if (shm != nullptr && options.transport == Transport::kAuto &&
      TensorBytes(*prepared) < options.shm_min_bytes && !ArgsInSharedBuffers(*prepared, *shm)) {
    shm = nullptr;
  }
  if (options.transport == Transport::kShm && shm == nullptr) {
    return absl::FailedPreconditionError(
        "transport shm: the target is not an agent on this host that offers shared memory "
        "(a router's agents are called directly only when it is not via_router).");
  }
  if (shm != nullptr) {
    absl::Status staged = client_internal::StageInSharedMemory(*prepared, *shm);
    if (staged.ok()) {
      plan.unary = true;  // only the header crosses gRPC
    } else {
      // The agent refused this client's memory (another user, too many
      // connections) or the socket broke: this client goes on over gRPC,
      // and this call too (unless it asked for shared memory), prepared
      // afresh without the shared region.
      impl.DisableSharedMemory();
      if (options.transport == Transport::kShm) return staged;
      prepared = client_internal::Prepare(request, options);
      if (!prepared.ok()) return prepared.status();
    }
  }
  if (shm == nullptr && *service == Service::kAgent) {
    FARCALL_ASSIGN_OR_RETURN(plan.ucx, impl.ChooseUcx(*prepared, options));
    if (plan.ucx.worker != nullptr) {
      prepared->ucx = true;
      plan.unary = true;  // only the header crosses gRPC
    }
  }
  prepared->via_router = *service == Service::kRouter;
  prepared->direct = impl.direct;
  if (*service == Service::kAgent) {
    plan.method = plan.unary ? kAgentCallMethod : kAgentExecuteMethod;
  } else {
    plan.method = plan.unary ? kRouterCallMethod : kRouterExecuteMethod;
  }
  plan.prepared = *std::move(prepared);
  return plan;
}

namespace {

// CallAsync's attempt `attempt` (0: the first): `done`, or, when a router
// refused it while draining (SendToAnotherRouter), the next attempt after
// kRouterRetryWaits[attempt], on a thread of its own (RunAfter).
struct AsyncAttempts : std::enable_shared_from_this<AsyncAttempts> {
  std::function<void(const CallOptions&, CallCallback)> start;  // one attempt
  std::function<bool()> to_router;
  std::function<bool()> stopped;  // by CallOptions::stop or Client::Close
  CallRequest request;
  CallOptions options;  // with the call's id
  absl::Time deadline;
  CallCallback done;
  size_t attempt = 0;

  void Start() {
    if (stopped()) return done(client_internal::StoppedStatus());
    auto self = shared_from_this();
    start(attempt == 0 ? options : WithTimeLeft(options, deadline),
          [self](absl::StatusOr<CallResult> r) {
            self->Ended(AsCallerSees(std::move(r), self->stopped()));
          });
  }
  void Ended(absl::StatusOr<CallResult> r) {
    if (attempt >= std::size(kRouterRetryWaits) || !SendToAnotherRouter(r, request, to_router()) ||
        absl::Now() + kRouterRetryWaits[attempt] >= deadline) {
      return done(std::move(r));
    }
    auto self = shared_from_this();
    client_internal::RunAfter(kRouterRetryWaits[attempt++], [self] { self->Start(); });
  }
};

}  // namespace

void Client::CallAsync(const CallRequest& request, const CallOptions& caller_options,
                       CallCallback done) {
  if (impl_->closer.stopped()) return done(ClosedStatus());
  auto attempts = std::make_shared<AsyncAttempts>();
  attempts->options = client_internal::WithCallId(caller_options);
  attempts->deadline = absl::Now() + attempts->options.timeout;
  attempts->request = request;
  attempts->done = std::move(done);
  std::shared_ptr<Impl> impl = impl_;
  attempts->start = [impl, request](const CallOptions& options, CallCallback d) {
    StartAsync(impl, request, options, std::move(d));
  };
  attempts->to_router = [impl] { return impl->IsRouter(); };
  attempts->stopped = [impl, stop = caller_options.stop] {
    return client_internal::Stopped(stop.get(), &impl->closer);
  };
  attempts->Start();
}

void Client::StartAsync(const std::shared_ptr<Impl>& impl, const CallRequest& request,
                        const CallOptions& caller_options, CallCallback done) {
  // One call_id for every attempt of this call (the lookaside takes its own).
  const CallOptions options = client_internal::WithCallId(caller_options);
  absl::StatusOr<Plan> plan = MakePlan(*impl, request, options);
  if (!plan.ok()) return done(plan.status());
  if (plan->lookaside != nullptr) {
    return plan->lookaside->CallAsync(request, caller_options, std::move(done));
  }
  if (plan->ucx.worker != nullptr && options.transport == Transport::kAuto) {
    // As in Call: UCX chosen by itself that failed before the handler ran
    // sends the call again over gRPC (from the gRPC thread `done` runs on).
    done = [impl, request, options, deadline = absl::Now() + options.timeout,
            done = std::move(done)](absl::StatusOr<CallResult> r) mutable {
      if (!UcxInputsFailed(r)) return done(std::move(r));
      impl->BackOffUcx();
      StartAsync(impl, request, OverGrpc(options, deadline), std::move(done));
    };
  }
  if (plan->unary) {
    auto* call =
        new UnaryCall(std::move(plan->prepared), options, impl->CredentialsFor(request.handler),
                      &impl->closer, std::move(done), plan->ucx);
    call->Start(*impl->generic, plan->method);
  } else {
    auto* call =
        new StreamCall(std::move(plan->prepared), options, impl->CredentialsFor(request.handler),
                       &impl->closer, std::move(done));
    call->Start(*impl->generic, plan->method);
  }
}

absl::StatusOr<CallResult> Client::Call(const CallRequest& request,
                                        const CallOptions& caller_options) {
  // One call_id for every attempt of this call.
  if (impl_->closer.stopped()) return ClosedStatus();
  const CallOptions options = client_internal::WithCallId(caller_options);
  const absl::Time deadline = absl::Now() + options.timeout;
  auto stopped = [&] { return client_internal::Stopped(options.stop.get(), &impl_->closer); };
  // (Whether it was stopped is asked once the attempt ended.)
  absl::StatusOr<CallResult> r = CallOnce(request, options);
  r = AsCallerSees(std::move(r), stopped());
  for (absl::Duration wait : kRouterRetryWaits) {
    if (!SendToAnotherRouter(r, request, impl_->IsRouter()) || absl::Now() + wait >= deadline) {
      break;
    }
    PauseBeforeRetry(wait);
    if (stopped()) return client_internal::StoppedStatus();
    r = CallOnce(request, WithTimeLeft(options, deadline));
    r = AsCallerSees(std::move(r), stopped());
  }
  return r;
}

absl::StatusOr<CallResult> Client::CallOnce(const CallRequest& request,
                                            const CallOptions& options) {
  const absl::Time deadline = absl::Now() + options.timeout;
  absl::StatusOr<Plan> plan = MakePlan(*impl_, request, options);
  if (!plan.ok()) return plan.status();
  if (plan->lookaside != nullptr) return plan->lookaside->Call(request, options);
  if (plan->ucx.worker != nullptr) {
    absl::StatusOr<CallResult> r = CallOverUcx(*std::move(plan), options);
    // UCX chosen by itself failed before the handler ran (the agent's worker
    // cannot be reached from here, say): the call goes again over gRPC, and
    // so do the next ones for a while.
    if (options.transport == Transport::kAuto && UcxInputsFailed(r)) {
      impl_->BackOffUcx();
      return CallOnce(request, OverGrpc(options, deadline));
    }
    return r;
  }
  if (plan->unary) {
    // Blocking on the caller's thread: no hand-off to a gRPC callback thread
    // and back, which is most of a small call's latency.
    ResponseReader reader(plan->prepared);
    if (!reader.init_status().ok()) return reader.init_status();
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
      AddCredentials(ctx, impl_->CredentialsFor(request.handler));
      client_internal::StopHook hook(options.stop.get(), &impl_->closer, [&] { ctx.TryCancel(); });
      grpc::ByteBuffer request_frame, response_frame;
      RequestWriter(plan->prepared, 0, completion).Next(&request_frame);
      grpc::Status s =
          BlockingRawUnary(*impl_->generic, ctx, plan->method, request_frame, &response_frame);
      completion->Set(Conclude(s, ctx, plan->prepared, Rpc::kUnary,
                               [&] { return DecodeUnary(reader, response_frame); }));
    }
    released.WaitForNotification();
    return out;
  }
  absl::Notification done;
  absl::StatusOr<CallResult> result;
  auto* call =
      new StreamCall(std::move(plan->prepared), options, impl_->CredentialsFor(request.handler),
                     &impl_->closer, [&](absl::StatusOr<CallResult> r) {
                       result = std::move(r);
                       done.Notify();
                     });
  call->Start(*impl_->generic, plan->method);
  done.WaitForNotification();
  return result;
}

absl::StatusOr<CallResult> Client::CallOverUcx(Plan plan, const CallOptions& options) {
  absl::Notification done;
  absl::StatusOr<CallResult> result;
  const CallCredentials credentials = impl_->CredentialsFor(plan.prepared.header.handler());
  auto* call = new UnaryCall(
      std::move(plan.prepared), options, credentials, &impl_->closer,
      [&](absl::StatusOr<CallResult> r) {
        result = std::move(r);
        done.Notify();
      },
      plan.ucx);
  call->Start(*impl_->generic, plan.method);
  done.WaitForNotification();
  return result;
}

std::future<absl::StatusOr<CallResult>> Client::CallFuture(const CallRequest& request,
                                                           const CallOptions& options) {
  auto promise = std::make_shared<std::promise<absl::StatusOr<CallResult>>>();
  std::future<absl::StatusOr<CallResult>> f = promise->get_future();
  CallAsync(request, options,
            [promise](absl::StatusOr<CallResult> r) { promise->set_value(std::move(r)); });
  return f;
}

absl::StatusOr<SharedBuffer> Client::AllocateShared(size_t bytes) {
  absl::StatusOr<Service> service = impl_->GetService(absl::Seconds(10));
  if (!service.ok()) return service.status();
  std::shared_ptr<client_internal::ShmChannel> shm = impl_->SharedMemory();
  if (shm == nullptr) {
    return absl::FailedPreconditionError(
        "shared memory needs an agent on this host that offers it; this target "
        "is a router, a remote agent, or an agent started with --shm_socket=''.");
  }
  absl::StatusOr<std::shared_ptr<client_internal::ShmRegion>> region =
      shm->AllocateUser(std::max<size_t>(bytes, 1));
  if (!region.ok()) return region.status();
  SharedBuffer b;
  b.data_ = (*region)->data;
  b.size_ = bytes;
  b.region_ = *std::move(region);
  return b;
}

std::string NewCallId() { return client_internal::FreshCallId(); }

const char* HealthName(AgentStatus::Health health) {
  switch (health) {
    case AgentStatus::Health::kServing:
      return "SERVING";
    case AgentStatus::Health::kNotServing:
      return "NOT_SERVING";
    case AgentStatus::Health::kDown:
      return "DOWN";
    case AgentStatus::Health::kUnknown:
      break;
  }
  return "UNKNOWN";
}

const char* TransportName(Transport transport) {
  switch (transport) {
    case Transport::kGrpc:
      return "grpc";
    case Transport::kShm:
      return "shm";
    case Transport::kUcx:
      return "ucx";
    case Transport::kAuto:
      break;
  }
  return "auto";
}

std::optional<Transport> TransportNamed(std::string_view name) {
  for (Transport t : {Transport::kAuto, Transport::kGrpc, Transport::kShm, Transport::kUcx}) {
    if (name == TransportName(t)) return t;
  }
  return std::nullopt;
}

const char* RpcName(Rpc rpc) {
  switch (rpc) {
    case Rpc::kUnary:
      return "unary";
    case Rpc::kStream:
      return "stream";
    case Rpc::kAuto:
      break;
  }
  return "auto";
}

std::optional<Rpc> RpcNamed(std::string_view name) {
  for (Rpc r : {Rpc::kAuto, Rpc::kUnary, Rpc::kStream}) {
    if (name == RpcName(r)) return r;
  }
  return std::nullopt;
}

absl::StatusOr<AgentDescription> Client::Describe(absl::Duration timeout) {
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineAfter(timeout));
  impl_->Prepare(ctx);
  v1::AgentInfo info;
  grpc::Status s = impl_->agent->Describe(&ctx, v1::DescribeRequest(), &info);
  if (!s.ok()) return FromGrpcStatus(s);
  return DescriptionFromProto(info);
}

absl::StatusOr<std::vector<AgentStatus>> Client::ListAgents(bool refresh, absl::Duration timeout) {
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineAfter(timeout));
  impl_->Prepare(ctx);
  v1::ListAgentsRequest req;
  req.set_refresh(refresh);
  v1::ListAgentsResponse resp;
  grpc::Status s = impl_->router->ListAgents(&ctx, req, &resp);
  if (!s.ok()) return FromGrpcStatus(s);
  std::vector<AgentStatus> out;
  for (const v1::AgentEntry& e : resp.agents()) {
    AgentStatus a;
    a.address = e.address();
    a.info = DescriptionFromProto(e.info());
    switch (e.health()) {
      case v1::AgentEntry::SERVING:
        a.health = AgentStatus::Health::kServing;
        break;
      case v1::AgentEntry::NOT_SERVING:
        a.health = AgentStatus::Health::kNotServing;
        break;
      case v1::AgentEntry::DOWN:
        a.health = AgentStatus::Health::kDown;
        break;
      default:
        a.health = AgentStatus::Health::kUnknown;
        break;
    }
    a.inflight_calls = e.inflight_calls();
    a.last_error = e.last_error();
    a.calls_total = e.calls_total();
    out.push_back(std::move(a));
  }
  return out;
}

void Client::Close() {
  impl_->closer.Stop();
  std::shared_ptr<client_internal::Lookaside> lookaside;
  {
    absl::MutexLock l(&impl_->mu);
    lookaside = impl_->lookaside;
  }
  if (lookaside != nullptr) lookaside->Close();
}

void Client::PauseBeforeRetry(absl::Duration pause) {
  const absl::Time until = absl::Now() + pause;
  grpc::Channel& channel = *impl_->channel;
  if (channel.GetState(/*try_to_connect=*/true) != GRPC_CHANNEL_READY &&
      channel.WaitForConnected(absl::ToChronoTime(until))) {
    return;
  }
  absl::SleepFor(until - absl::Now());
}

absl::Status Client::Health(absl::Duration timeout) {
  grpc::health::v1::Health::Stub stub(impl_->channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineAfter(timeout));
  grpc::health::v1::HealthCheckResponse resp;
  grpc::Status s = stub.Check(&ctx, grpc::health::v1::HealthCheckRequest(), &resp);
  if (!s.ok()) return FromGrpcStatus(s);
  if (resp.status() != grpc::health::v1::HealthCheckResponse::SERVING) {
    return absl::UnavailableError(absl::StrCat(
        "the server reports ",
        grpc::health::v1::HealthCheckResponse::ServingStatus_Name(resp.status()), "."));
  }
  return absl::OkStatus();
}

}  // namespace farcall
