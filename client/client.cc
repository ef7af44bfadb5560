// The client's public face: it picks, once per attempt, how a call goes
// (straight to its target; to a router's agents, through the lookaside; or
// through the router), and sends it again to another router while a router
// drains. How one target is reached is target_channel.cc's; the RPCs are
// rpc_calls.cc's.
#include "farcall/client.h"

#include <utility>

#include "absl/synchronization/mutex.h"
#include "client/call_codec.h"
#include "client/call_stop.h"
#include "client/lookaside.h"
#include "client/run_after.h"
#include "client/target_channel.h"
#include "core/error_reason.h"
#include "core/status_macros.h"
#include "core/wire/grpc_status.h"
#include "grpc/grpc.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace farcall {
namespace {

using client_internal::AsCallerSees;
using client_internal::Lookaside;
using client_internal::TargetChannel;

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

absl::Status ClosedStatus() { return absl::FailedPreconditionError("this client is closed."); }

bool SendToAnotherRouter(const absl::StatusOr<CallResult>& r, const CallRequest& request,
                         bool to_router) {
  if (r.ok()) return false;
  const ErrorReason reason = ReasonOf(r.status());
  if (reason == ErrorReason::kRouterDraining) return true;
  return to_router && !request.has_side_effect && absl::IsUnavailable(r.status()) &&
         reason == ErrorReason::kUnspecified && TracebackOf(r.status()).empty();
}

// `options` for the next attempt, within what is left before `deadline`.
CallOptions WithTimeLeft(CallOptions options, absl::Time deadline) {
  options.timeout = std::max(deadline - absl::Now(), absl::ZeroDuration());
  return options;
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

struct Client::State : std::enable_shared_from_this<Client::State> {
  std::shared_ptr<CallStop> closer = std::make_shared<CallStop>();  // Close()
  std::shared_ptr<TargetChannel> channel;
  absl::Mutex mu;
  // For a router: the agents it names are called directly.
  std::shared_ptr<Lookaside> lookaside ABSL_GUARDED_BY(mu);

  bool Stopped(const CallOptions& options) const {
    return client_internal::Stopped(options.stop.get(), closer.get());
  }

  // How an attempt goes: through the lookaside (returned), or straight to
  // the target (null): an agent, or a router that carries the call itself
  // (via_router, calls sent unchecked or naming several platforms).
  absl::StatusOr<std::shared_ptr<Lookaside>> Route(const CallRequest& request,
                                                   const CallOptions& options) {
    if (options.via_router || !options.validate_locally || !request.platforms.empty() ||
        channel->IsAgent()) {
      return nullptr;
    }
    // A bad call fails here as it would straight to an agent, before the
    // target is asked what it is.
    FARCALL_RETURN_IF_ERROR(client_internal::Prepare(request, options).status());
    FARCALL_ASSIGN_OR_RETURN(
        TargetChannel::Service service,
        channel->GetService(options.timeout, options.wait_for_ready, request.handler));
    if (service != TargetChannel::Service::kRouter) return nullptr;
    absl::MutexLock l(&mu);
    if (lookaside == nullptr) lookaside = std::make_shared<Lookaside>(channel);
    return lookaside;
  }

  // One attempt, blocking. `insist`: Lookaside::Insists of the call as
  // the caller gave it (`options` carry the id the client chose otherwise).
  absl::StatusOr<CallResult> Attempt(const CallRequest& request, const CallOptions& options,
                                     bool insist) {
    absl::StatusOr<std::shared_ptr<Lookaside>> la = Route(request, options);
    if (!la.ok()) return AsCallerSees(la.status(), Stopped(options));
    // (The lookaside's own refusals too: a stopped call is CANCELLED.)
    if (*la != nullptr)
      return AsCallerSees((*la)->Call(request, options, insist), Stopped(options));
    return channel->Call(request, options);
  }

  // One attempt, returning at once.
  void StartAttempt(const CallRequest& request, const CallOptions& options, bool insist,
                    CallCallback done) {
    absl::StatusOr<std::shared_ptr<Lookaside>> la = Route(request, options);
    if (!la.ok()) return done(AsCallerSees(la.status(), Stopped(options)));
    if (*la != nullptr) {
      auto state = shared_from_this();
      return (*la)->CallAsync(
          request, options, insist,
          [state, options, done = std::move(done)](absl::StatusOr<CallResult> r) {
            done(AsCallerSees(std::move(r), state->Stopped(options)));
          });
    }
    channel->CallAsync(request, options, std::move(done));
  }

  struct AsyncAttempts;
};

// CallAsync's attempt `attempt` (0: the first): `done`, or, when a router
// refused it while draining (SendToAnotherRouter), the next attempt after
// kRouterRetryWaits[attempt], on a thread of its own (RunAfter). It holds
// the client's state, so the client may go before its calls end.
struct Client::State::AsyncAttempts : std::enable_shared_from_this<AsyncAttempts> {
  std::shared_ptr<State> state;
  CallRequest request;
  CallOptions options;  // with the call's id
  bool insist = false;  // Lookaside::Insists, before the id was given
  absl::Time deadline;
  CallCallback done;
  size_t attempt = 0;

  void Start() {
    if (state->Stopped(options)) return done(client_internal::StoppedStatus());
    auto self = shared_from_this();
    state->StartAttempt(request, attempt == 0 ? options : WithTimeLeft(options, deadline), insist,
                        [self](absl::StatusOr<CallResult> r) { self->Ended(std::move(r)); });
  }
  void Ended(absl::StatusOr<CallResult> r) {
    if (attempt >= std::size(kRouterRetryWaits) ||
        !SendToAnotherRouter(r, request, state->channel->IsRouter()) ||
        absl::Now() + kRouterRetryWaits[attempt] >= deadline) {
      return done(std::move(r));
    }
    auto self = shared_from_this();
    client_internal::RunAfter(kRouterRetryWaits[attempt++], [self] { self->Start(); });
  }
};

Client::Client(std::shared_ptr<State> state) : state_(std::move(state)) {}
Client::~Client() = default;

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(const std::string& target,
                                                        const ClientOptions& options) {
  // Keep gRPC initialised for the life of the process. Otherwise the last
  // client to go away shuts gRPC down while its callback thread may still be
  // polling, and gRPC 1.51 can crash when the next client starts it again.
  static const bool kGrpcInitialised = [] {
    grpc_init();
    return true;
  }();
  (void)kGrpcInitialised;
  auto state = std::make_shared<State>();
  FARCALL_ASSIGN_OR_RETURN(state->channel, TargetChannel::Open(target, options, state->closer));
  return std::unique_ptr<Client>(new Client(std::move(state)));
}

absl::StatusOr<CallResult> Client::Call(const CallRequest& request,
                                        const CallOptions& caller_options) {
  if (state_->closer->stopped()) return ClosedStatus();
  // One call_id for every attempt of this call.
  const CallOptions options = client_internal::WithCallId(caller_options);
  const bool insist = Lookaside::Insists(request, caller_options);
  const absl::Time deadline = absl::Now() + options.timeout;
  absl::StatusOr<CallResult> r = state_->Attempt(request, options, insist);
  for (absl::Duration wait : kRouterRetryWaits) {
    if (!SendToAnotherRouter(r, request, state_->channel->IsRouter()) ||
        absl::Now() + wait >= deadline) {
      break;
    }
    PauseBeforeRetry(wait);
    if (state_->Stopped(options)) return client_internal::StoppedStatus();
    r = state_->Attempt(request, WithTimeLeft(options, deadline), insist);
  }
  return r;
}

void Client::CallAsync(const CallRequest& request, const CallOptions& caller_options,
                       CallCallback done) {
  if (state_->closer->stopped()) return done(ClosedStatus());
  auto attempts = std::make_shared<State::AsyncAttempts>();
  attempts->state = state_;
  attempts->options = client_internal::WithCallId(caller_options);
  attempts->insist = Lookaside::Insists(request, caller_options);
  attempts->deadline = absl::Now() + attempts->options.timeout;
  attempts->request = request;
  attempts->done = std::move(done);
  attempts->Start();
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
  FARCALL_ASSIGN_OR_RETURN(std::shared_ptr<client_internal::ShmRegion> region,
                           state_->channel->AllocateShared(bytes));
  SharedBuffer b;
  b.data_ = region->data;
  b.size_ = bytes;
  b.region_ = std::move(region);
  return b;
}

absl::StatusOr<AgentDescription> Client::Describe(absl::Duration timeout) {
  grpc::ClientContext ctx;
  ctx.set_deadline(client_internal::DeadlineAfter(timeout));
  state_->channel->AddToken(ctx);
  v1::AgentInfo info;
  grpc::Status s = state_->channel->agent_stub().Describe(&ctx, v1::DescribeRequest(), &info);
  if (!s.ok()) return FromGrpcStatus(s);
  return DescriptionFromProto(info);
}

absl::StatusOr<std::vector<AgentStatus>> Client::ListAgents(bool refresh, absl::Duration timeout) {
  grpc::ClientContext ctx;
  ctx.set_deadline(client_internal::DeadlineAfter(timeout));
  state_->channel->AddToken(ctx);
  v1::ListAgentsRequest req;
  req.set_refresh(refresh);
  v1::ListAgentsResponse resp;
  grpc::Status s = state_->channel->router_stub().ListAgents(&ctx, req, &resp);
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

void Client::Close() { state_->closer->Stop(); }

void Client::PauseBeforeRetry(absl::Duration pause) { state_->channel->PauseBeforeRetry(pause); }

absl::Status Client::Health(absl::Duration timeout) {
  grpc::health::v1::Health::Stub stub(state_->channel->channel());
  grpc::ClientContext ctx;
  ctx.set_deadline(client_internal::DeadlineAfter(timeout));
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
