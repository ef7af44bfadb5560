// The client's public face: it picks, once per attempt, how a call goes
// (straight to its target; to a router's agents, through the lookaside; or
// through the router), and sends it again to another router while a router
// drains. How one target is reached is target_channel.cc's; the RPCs are
// rpc_calls.cc's.
#include "farcall/client.h"

#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/call_codec.h"
#include "client/call_stop.h"
#include "client/lookaside.h"
#include "client/run_after.h"
#include "client/target_channel.h"
#include "core/error_reason.h"
#include "core/retry_policy.h"
#include "core/status_macros.h"
#include "core/tensor_spec.h"
#include "core/wire/grpc_status.h"
#include "grpc/grpc.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace farcall {
namespace {

using client_internal::AsCallerSees;
using client_internal::Lookaside;
using client_internal::TargetChannel;

absl::Status ClosedStatus() { return absl::FailedPreconditionError("this client is closed."); }

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
  d.resident_count = info.resident_count();
  d.resident_bytes = info.resident_bytes();
  d.inflight_calls = info.inflight_calls();
  d.last_failed_call = info.last_failed_call();
  d.last_failed_call_age = absl::Milliseconds(info.last_failed_call_age_ms());
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

  struct Attempts;
};

// One call's attempts: the one state machine of a call at the client's top
// level. The blocking Call drives it on the caller's thread (Run); CallAsync
// on RunAfter's and gRPC's threads (Start). What follows each attempt is
// core/retry_policy.h's NextStep, and only that. It holds the client's
// state, so the client may go before its calls end.
//
// Router rollouts: a router draining for shutdown refuses new calls
// (ErrorReason::kRouterDraining) for about a second, then sends its clients
// GOAWAY (core/wire/grpc_server.h), and the channel reconnects to another
// router (another address of the target, or the Service's next pod). A
// refused call, and a call without side effects whose router could not be
// reached meanwhile, goes again after kRouterBackoff's waits while its
// deadline allows (kRouterRetries: 5 times over 3.1 s, which outlasts the
// refusals and a reconnect), whatever CallOptions::retries says (that sets
// how often a call goes again to the same target). A call a server ended
// with CANCELLED (AsCallerSees: UNAVAILABLE) counts as one that did not
// reach it.
struct Client::State::Attempts : std::enable_shared_from_this<Attempts> {
  std::shared_ptr<State> state;
  const CallRequest* request = nullptr;  // the caller's (Call), or `owned`
  CallRequest owned;                     // CallAsync's own copy
  CallOptions options;                   // with the call's id
  bool insist = false;                   // Lookaside::Insists, before the id was given
  absl::Time deadline;
  int router_left = kRouterRetries;  // through another router
  int same_left = 0;                 // CallOptions::retries left
  Backoff router_backoff = kRouterBackoff;
  Backoff same_target_backoff = kSameTargetBackoff;
  // keep_aliased_args: each aliased arg's memory, a copy of it as it was
  // before the first attempt, and its size.
  struct Kept {
    uint8_t* memory;
    std::unique_ptr<uint8_t[]> copy;
    size_t bytes;
  };
  std::vector<Kept> kept;
  CallCallback done;  // CallAsync's

  absl::Status Init(const CallRequest& r, const CallOptions& caller_options) {
    options = client_internal::WithCallId(caller_options);
    insist = Lookaside::Insists(r, caller_options);
    deadline = absl::Now() + options.timeout;
    same_left = std::max(options.retries, 0);
    if (!options.keep_aliased_args || r.has_side_effect) return absl::OkStatus();
    for (const auto& [i, o] : r.aliases) {
      if (i >= r.args.size() || r.args[i].writable_data() == nullptr) continue;  // refused later
      absl::StatusOr<int64_t> bytes = ByteSize(r.args[i].spec(), "");
      if (!bytes.ok()) continue;
      const size_t n = static_cast<size_t>(*bytes);
      std::unique_ptr<uint8_t[]> copy(new (std::nothrow) uint8_t[n > 0 ? n : 1]);
      if (copy == nullptr) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "cannot allocate ", n, " bytes on the client for a copy of args[", i,
            "] (keep_aliased_args); give the call less, or set keep_aliased_args to false."));
      }
      std::memcpy(copy.get(), r.args[i].data(), n);
      kept.push_back({r.args[i].writable_data(), std::move(copy), n});
    }
    return absl::OkStatus();
  }

  // What is left of the timeout (CallAsync's first attempt may have waited
  // for a thread, RunAfter); the caller's own for Call's first.
  CallOptions AttemptOptions(bool first = false) const {
    return first ? options : WithTimeLeft(options, deadline);
  }

  // Puts each kept arg back as it was before the first attempt.
  void Restore() {
    for (const Kept& k : kept) std::memcpy(k.memory, k.copy.get(), k.bytes);
  }

  // What follows the attempt that ended with `r`: the wait before the next
  // one, or none, and then `r` is what the caller gets.
  std::optional<absl::Duration> Next(absl::StatusOr<CallResult>& r) {
    if (r.ok()) return std::nullopt;
    const bool landed = LandedResultOf(r.status()).has_value();
    const Hop hop = state->channel->IsRouter() ? Hop::kRouter : Hop::kAgent;
    RetryStep step = NextStep({r.status(), request->has_side_effect, hop,
                               /*not_delivered=*/false, !kept.empty()});
    // A call whose caller named its id may have run, in an earlier call of
    // the caller's, on the agent that refused it now as it drains (before
    // its ledger was asked): it goes to no other agent.
    if (insist && ReasonOf(r.status()) == ErrorReason::kAgentDraining) step = RetryStep::kDone;
    std::optional<absl::Duration> wait;
    if (step == RetryStep::kAnotherRouter || step == RetryStep::kSameTarget) {
      const bool router = step == RetryStep::kAnotherRouter;
      int& left = router ? router_left : same_left;
      Backoff& b = router ? router_backoff : same_target_backoff;
      if (left > 0 && absl::Now() + b.Peek() < deadline) {
        wait = b.Next();
        --left;
      }
    }
    if (landed && !kept.empty()) {
      // The caller's memory gets its args back whatever follows.
      Restore();
      if (!wait.has_value()) r = WithoutLandedResult(r.status());
      return wait;
    }
    if (!wait.has_value()) r = AsFinalStatus(r.status());
    return wait;
  }

  absl::StatusOr<CallResult> Run() {
    for (bool first = true;; first = false) {
      absl::StatusOr<CallResult> r = state->Attempt(*request, AttemptOptions(first), insist);
      std::optional<absl::Duration> wait = Next(r);
      if (!wait.has_value()) return r;
      state->channel->PauseBeforeRetry(*wait);
      if (state->Stopped(options)) return client_internal::StoppedStatus();
    }
  }

  void Start() {
    if (state->Stopped(options)) return done(client_internal::StoppedStatus());
    auto self = shared_from_this();
    state->StartAttempt(*request, AttemptOptions(), insist,
                        [self](absl::StatusOr<CallResult> r) { self->Ended(std::move(r)); });
  }
  void Ended(absl::StatusOr<CallResult> r) {
    std::optional<absl::Duration> wait = Next(r);
    if (!wait.has_value()) return done(std::move(r));
    auto self = shared_from_this();
    client_internal::RunAfter(*wait, [self] { self->Start(); });
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
  State::Attempts attempts;
  attempts.state = state_;
  attempts.request = &request;
  FARCALL_RETURN_IF_ERROR(attempts.Init(request, caller_options));
  return attempts.Run();
}

void Client::CallAsync(const CallRequest& request, const CallOptions& caller_options,
                       CallCallback done) {
  if (state_->closer->stopped()) return done(ClosedStatus());
  auto attempts = std::make_shared<State::Attempts>();
  attempts->state = state_;
  attempts->owned = request;
  attempts->request = &attempts->owned;
  if (absl::Status s = attempts->Init(request, caller_options); !s.ok()) return done(s);
  attempts->done = std::move(done);
  // The first attempt may block (a Describe, a router's Resolve, a first
  // connection), which is never done on the caller's thread: that may be a
  // gRPC thread, running a `done` that chains the next call. A call to an
  // agent this client knows already has nothing to wait for.
  if (state_->channel->IsAgent()) return attempts->Start();
  client_internal::RunAfter(absl::ZeroDuration(), [attempts] { attempts->Start(); });
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
