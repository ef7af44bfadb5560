#include "client/target_channel.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "client/call_stop.h"
#include "client/ucx_exchange.h"
#include "core/error_reason.h"
#include "core/retry_policy.h"
#include "core/status_macros.h"
#include "core/tokens.h"
#include "core/wire/grpc_status.h"
#include "core/wire/protocol.h"
#include "core/wire/security.h"
#include "grpc/grpc.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"

namespace farcall::client_internal {
namespace {

// `total` plus `sizes`, saturating: sizes come from the caller's specs.
int64_t SaturatingSum(const std::vector<int64_t>& sizes, int64_t total = 0) {
  for (int64_t b : sizes) total = b > INT64_MAX - total ? INT64_MAX : total + b;
  return total;
}
// The bytes of the results that come back: not those that stay on the
// agent as residents.
std::vector<int64_t> ReturnedResultBytes(const PreparedCall& call) {
  std::vector<int64_t> sizes = call.validated.result_bytes;
  for (size_t o = 0; o < sizes.size() && o < call.result_stays.size(); ++o) {
    if (call.result_stays[o]) sizes[o] = 0;
  }
  return sizes;
}
int64_t TensorBytes(const PreparedCall& call) {
  return SaturatingSum(ReturnedResultBytes(call), SaturatingSum(call.validated.arg_bytes));
}

// Whether any of a call's args lies in the caller's shared buffers.
bool ArgsInSharedBuffers(const PreparedCall& call, ShmChannel& channel) {
  for (size_t i = 0; i < call.args.size(); ++i) {
    uint64_t offset = 0;
    if (channel.Locate(call.args[i].data(), call.validated.arg_bytes[i], &offset) != nullptr) {
      return true;
    }
  }
  return false;
}

// Whether a call over UCX failed because its args could not reach the agent
// (so the handler did not run, and the call may go again another way).
bool UcxInputsFailed(const absl::StatusOr<CallResult>& r) {
  return !r.ok() && ReasonOf(r.status()) == ErrorReason::kInputsNotDelivered;
}

// `options` for a call that goes again over gRPC, within what is left
// before `deadline` (none left: it ends DEADLINE_EXCEEDED at once).
CallOptions OverGrpc(CallOptions options, absl::Time deadline) {
  options.transport = Transport::kGrpc;
  options.timeout = std::max(deadline - absl::Now(), absl::ZeroDuration());
  return options;
}

// One channel per target for the life of the process, shared by every
// TargetChannel.
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

}  // namespace

bool IsLoopbackTarget(absl::string_view t) {
  absl::ConsumePrefix(&t, "ipv4:") || absl::ConsumePrefix(&t, "ipv6:");
  if (absl::StartsWith(t, "[::1]:") || absl::StartsWith(t, "localhost:")) return true;
  // 127.0.0.0/8, written as an IPv4 literal (not a name that starts so).
  const absl::string_view host = t.substr(0, t.find(':'));
  return absl::StartsWith(host, "127.") && host.find_first_not_of("0123456789.") == host.npos &&
         host.size() < t.size();
}

bool UsesTls(const ClientOptions& options) {
  return !options.tls_ca.empty() || !options.tls_cert.empty();
}

bool TokenMayGo(absl::string_view target, const ClientOptions& options) {
  return UsesTls(options) || options.allow_insecure_tokens || IsLoopbackTarget(target);
}

absl::StatusOr<CallResult> AsCallerSees(absl::StatusOr<CallResult> r, bool stopped) {
  if (r.ok()) return r;
  if (stopped) return StoppedStatus();
  if (!absl::IsCancelled(r.status())) return r;
  absl::Status s = absl::UnavailableError(
      "the server ended the call before it answered (it shut down or went away); the call may "
      "have run.");
  std::optional<LandedResult> landed = LandedResultOf(r.status());
  return landed.has_value() ? WithLandedResult(std::move(s), *landed) : s;
}

// What a call needs before it goes out: its frames, and which RPC.
struct TargetChannel::Plan {
  PreparedCall prepared;
  bool unary = false;
  std::string method;
  UcxRoute ucx;  // set when the tensors go over UCX
};

absl::StatusOr<std::shared_ptr<TargetChannel>> TargetChannel::Open(
    const std::string& target, const ClientOptions& options,
    std::shared_ptr<const CallStop> closer) {
  if (target.empty()) return absl::InvalidArgumentError("empty target address.");
  std::shared_ptr<TargetChannel> t(new TargetChannel());
  FARCALL_ASSIGN_OR_RETURN(t->channel_, SharedChannel(target, options));
  if (!options.token.empty()) {
    if (!TokenMayGo(target, options)) {
      return absl::InvalidArgumentError(
          absl::StrCat("the token would travel in clear to ", target,
                       ", which is not this host: use TLS (tls_ca), or allow_insecure_tokens (CLI "
                       "--allow_insecure_tokens) where the network is trusted."));
    }
    t->authorization_ = absl::StrCat(kBearerPrefix, options.token);
  }
  t->closer_ = std::move(closer);
  t->target_ = target;
  t->options_ = options;
  t->generic_ = std::make_unique<grpc::GenericStub>(t->channel_);
  t->agent_ = v1::Agent::NewStub(t->channel_);
  t->router_ = v1::Router::NewStub(t->channel_);
  return t;
}

void TargetChannel::AddToken(grpc::ClientContext& ctx) const {
  AddCredentials(ctx, {authorization_, ""});
}

CallCredentials TargetChannel::CredentialsFor(const std::string& handler) const {
  if (capability_source_) {
    std::string capability = capability_source_(handler);
    if (!capability.empty()) return {"", std::move(capability)};
  }
  return {authorization_, ""};
}

bool TargetChannel::Stopped(const CallOptions& options) const {
  return client_internal::Stopped(options.stop.get(), closer_.get());
}

void TargetChannel::MarkDirect() { direct_ = true; }

void TargetChannel::SetCapabilitySource(
    std::function<std::string(const std::string& handler)> source) {
  capability_source_ = std::move(source);
}

bool TargetChannel::Connected(absl::Duration wait) {
  if (channel_->GetState(/*try_to_connect=*/true) == GRPC_CHANNEL_READY) return true;
  return wait > absl::ZeroDuration() && channel_->WaitForConnected(DeadlineAfter(wait));
}

void TargetChannel::PauseBeforeRetry(absl::Duration pause) {
  const absl::Time until = absl::Now() + pause;
  if (channel_->GetState(/*try_to_connect=*/true) != GRPC_CHANNEL_READY &&
      channel_->WaitForConnected(absl::ToChronoTime(until))) {
    return;
  }
  absl::SleepFor(until - absl::Now());
}

bool TargetChannel::IsRouter() {
  absl::MutexLock l(&mu_);
  return service_ == Service::kRouter;
}

bool TargetChannel::IsAgent() {
  absl::MutexLock l(&mu_);
  return service_ == Service::kAgent;
}

absl::StatusOr<TargetChannel::Service> TargetChannel::GetService(absl::Duration timeout,
                                                                 bool wait_for_ready,
                                                                 const std::string& handler) {
  {
    absl::MutexLock l(&mu_);
    if (service_ != Service::kUnknown) return service_;
  }
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineAfter(timeout));
  ctx.set_wait_for_ready(wait_for_ready);
  AddCredentials(ctx, CredentialsFor(handler));
  v1::AgentInfo info;
  grpc::Status s = agent_->Describe(&ctx, v1::DescribeRequest(), &info);
  Service found;
  if (s.ok()) {
    found = Service::kAgent;
    absl::MutexLock l(&mu_);
    shm_socket_ = info.shm_socket();
    ucx_address_ = info.ucx_address();
  } else if (s.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
    found = Service::kRouter;
  } else {
    return FromGrpcStatus(s);
  }
  absl::MutexLock l(&mu_);
  service_ = found;
  return found;
}

// A channel whose agent went away (a restart) is dropped: this call goes
// over gRPC, and the next one asks the agent afresh for its socket. Shared
// memory serves only calls over loopback TCP (the agent checks the caller's
// user on each call).
std::shared_ptr<ShmChannel> TargetChannel::SharedMemory() {
  absl::MutexLock l(&mu_);
  if (shm_ != nullptr && !shm_->Alive()) {
    shm_.reset();
    shm_tried_ = false;
    service_ = Service::kUnknown;  // Describe again: the socket's name changes
    return nullptr;
  }
  if (!shm_tried_ && absl::Now() >= shm_retry_at_) {
    shm_tried_ = true;
    if (service_ == Service::kAgent && !shm_socket_.empty() && IsLoopbackTarget(target_)) {
      absl::StatusOr<std::shared_ptr<ShmChannel>> c = ShmChannel::Connect(shm_socket_);
      if (c.ok()) {
        shm_ = *std::move(c);
      } else {
        ShmBackOffLocked();
      }
    }
  }
  return shm_;
}

void TargetChannel::DisableSharedMemory() {
  absl::MutexLock l(&mu_);
  shm_.reset();
  ShmBackOffLocked();
}

void TargetChannel::ShmBackOffLocked() {
  shm_tried_ = false;
  shm_retry_at_ = absl::Now() + shm_backoff_.Next();
  service_ = Service::kUnknown;
}

absl::StatusOr<std::shared_ptr<ShmRegion>> TargetChannel::AllocateShared(size_t bytes) {
  FARCALL_RETURN_IF_ERROR(GetService(absl::Seconds(10)).status());
  std::shared_ptr<ShmChannel> shm = SharedMemory();
  if (shm == nullptr) {
    return absl::FailedPreconditionError(
        "shared memory needs an agent on this host that offers it; this target "
        "is a router, a remote agent, or an agent started with --shm_socket=''.");
  }
  return shm->AllocateUser(std::max<size_t>(bytes, 1));
}

absl::StatusOr<UcxRoute> TargetChannel::ChooseUcx(const PreparedCall& call, const CallOptions& o) {
  const bool forced = o.transport == Transport::kUcx;
  if (!forced) {
    if (o.transport != Transport::kAuto || o.rpc != Rpc::kAuto) return UcxRoute{};
    if (TensorBytes(call) < o.ucx_min_bytes) return UcxRoute{};
  }
  UcxRoute route;
  {
    // Unless forced, none while UCX failed this client a moment ago.
    absl::MutexLock l(&mu_);
    if (forced || absl::Now() >= ucx_retry_at_) route.agent_address = ucx_address_;
  }
  if (route.agent_address.empty()) {
    if (!forced) return route;
    return absl::FailedPreconditionError(
        "transport ucx: the agent offers no UCX data plane (it was built without UCX, was "
        "started with --transports without ucx, or requires TLS or tokens without "
        "--allow_ucx_with_tls).");
  }
  absl::StatusOr<ucx::Worker*> w = ProcessUcxWorker(options_.ucx_transports);
  if (!w.ok()) {
    if (forced) {
      return absl::FailedPreconditionError(
          absl::StrCat("transport ucx: UCX cannot start in this process: ", w.status().message()));
    }
    BackOffUcx();
    return UcxRoute{};
  }
  route.worker = *w;
  return route;
}

void TargetChannel::BackOffUcx() {
  absl::MutexLock l(&mu_);
  ucx_retry_at_ = absl::Now() + ucx_backoff_.Next();
}

absl::StatusOr<TargetChannel::Plan> TargetChannel::MakePlan(const CallRequest& request,
                                                            const CallOptions& options) {
  absl::StatusOr<PreparedCall> prepared = Prepare(request, options);
  if (!prepared.ok()) return prepared.status();
  absl::StatusOr<Service> service =
      GetService(options.timeout, options.wait_for_ready, request.handler);
  if (!service.ok()) {
    absl::Status s = service.status();
    if (direct_ && absl::IsUnavailable(s)) MarkNotDelivered(s);
    return s;
  }
  Plan plan;
  if (options.transport == Transport::kUcx) {
    if (!UcxBuiltIn()) {
      return absl::FailedPreconditionError(
          "transport ucx: this build of farcall has no UCX data plane; use auto, grpc or shm.");
    }
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
  if ((prepared->names_residents && options.transport == Transport::kUcx) ||
      (prepared->keeps_results && options.transport == Transport::kShm)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "transport ", TransportName(options.transport), ": a call that ",
        prepared->keeps_results ? "keeps results as resident arrays" : "names resident arrays",
        " sends its other tensors over gRPC", prepared->keeps_results ? "" : " or shared memory",
        "; use auto or grpc."));
  }
  plan.unary = options.rpc == Rpc::kUnary;
  if (options.rpc == Rpc::kAuto) {
    // Well under the servers' 64 MiB message limit, whatever chunk_bytes is.
    const int64_t unary_limit = std::min<int64_t>(options.chunk_bytes, int64_t{32} << 20);
    plan.unary = SaturatingSum(prepared->validated.arg_bytes) <= unary_limit &&
                 SaturatingSum(ReturnedResultBytes(*prepared)) <= unary_limit;
  }
  const bool want_shm =
      !prepared->keeps_results &&
      (options.transport == Transport::kShm ||
       (options.transport == Transport::kAuto && options.allow_shm && options.rpc == Rpc::kAuto));
  std::shared_ptr<ShmChannel> shm = want_shm ? SharedMemory() : nullptr;
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
    absl::Status staged = StageInSharedMemory(*prepared, *shm);
    if (staged.ok()) {
      plan.unary = true;  // only the header crosses gRPC
    } else {
      // The agent refused this client's memory (another user, too many
      // connections) or the socket broke: this client goes on over gRPC,
      // and this call too (unless it asked for shared memory), prepared
      // afresh without the shared region.
      DisableSharedMemory();
      if (options.transport == Transport::kShm) return staged;
      prepared = Prepare(request, options);
      if (!prepared.ok()) return prepared.status();
    }
  }
  if (shm == nullptr && *service == Service::kAgent && !prepared->names_residents) {
    FARCALL_ASSIGN_OR_RETURN(plan.ucx, ChooseUcx(*prepared, options));
    if (plan.ucx.worker != nullptr) {
      prepared->ucx = true;
      plan.unary = true;  // only the header crosses gRPC
    }
  }
  prepared->via_router = *service == Service::kRouter;
  prepared->direct = direct_;
  if (*service == Service::kAgent) {
    plan.method = plan.unary ? kAgentCallMethod : kAgentExecuteMethod;
  } else {
    plan.method = plan.unary ? kRouterCallMethod : kRouterExecuteMethod;
  }
  plan.prepared = *std::move(prepared);
  return plan;
}

RpcTarget TargetChannel::RpcTargetFor(const Plan& plan) const {
  return {generic_.get(), plan.method, closer_.get()};
}

absl::StatusOr<CallResult> TargetChannel::Call(const CallRequest& request,
                                               const CallOptions& caller_options) {
  CallOptions options = WithCallId(caller_options);
  const absl::Time deadline = absl::Now() + options.timeout;
  const CallCredentials credentials = CredentialsFor(request.handler);
  absl::StatusOr<CallResult> r;
  for (;;) {
    absl::StatusOr<Plan> plan = MakePlan(request, options);
    if (!plan.ok()) {
      r = plan.status();
      break;
    }
    const RpcTarget rpc = RpcTargetFor(*plan);
    if (plan->ucx.worker != nullptr) {
      r = Await([&](CallCallback done) {
        StartUnaryCall(rpc, std::move(plan->prepared), options, credentials, std::move(done),
                       plan->ucx);
      });
      // UCX chosen by itself failed before the handler ran (the agent's
      // worker cannot be reached from here, say): the call goes again over
      // gRPC, and so do the next ones for a while.
      if (options.transport == Transport::kAuto && UcxInputsFailed(r)) {
        BackOffUcx();
        options = OverGrpc(options, deadline);
        continue;
      }
    } else if (plan->unary) {
      r = BlockingUnaryCall(rpc, plan->prepared, options, credentials);
    } else {
      r = Await([&](CallCallback done) {
        StartStreamCall(rpc, std::move(plan->prepared), options, credentials, std::move(done));
      });
    }
    break;
  }
  return AsCallerSees(std::move(r), Stopped(options));
}

void TargetChannel::CallAsync(const CallRequest& request, const CallOptions& caller_options,
                              CallCallback done) {
  const CallOptions options = WithCallId(caller_options);
  Start(
      request, options,
      [self = shared_from_this(), stop = options.stop,
       done = std::move(done)](absl::StatusOr<CallResult> r) {
        done(AsCallerSees(std::move(r), client_internal::Stopped(stop.get(), self->closer_.get())));
      });
}

void TargetChannel::Start(const CallRequest& request, const CallOptions& options,
                          CallCallback done) {
  absl::StatusOr<Plan> plan = MakePlan(request, options);
  if (!plan.ok()) return done(plan.status());
  if (plan->ucx.worker != nullptr && options.transport == Transport::kAuto) {
    // As in Call: UCX chosen by itself that failed before the handler ran
    // sends the call again over gRPC (from the gRPC thread `done` runs on).
    done = [self = shared_from_this(), request, options, deadline = absl::Now() + options.timeout,
            done = std::move(done)](absl::StatusOr<CallResult> r) mutable {
      if (!UcxInputsFailed(r)) return done(std::move(r));
      self->BackOffUcx();
      self->Start(request, OverGrpc(options, deadline), std::move(done));
    };
  }
  const CallCredentials credentials = CredentialsFor(request.handler);
  if (plan->unary) {
    StartUnaryCall(RpcTargetFor(*plan), std::move(plan->prepared), options, credentials,
                   std::move(done), plan->ucx);
  } else {
    StartStreamCall(RpcTargetFor(*plan), std::move(plan->prepared), options, credentials,
                    std::move(done));
  }
}

}  // namespace farcall::client_internal
