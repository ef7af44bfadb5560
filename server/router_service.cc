#include "server/router_service.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/call_validation.h"
#include "core/caller_slots.h"
#include "core/error_reason.h"
#include "core/live_calls.h"
#include "core/log.h"
#include "core/metrics.h"
#include "core/ref_counted.h"
#include "core/resident_handle.h"
#include "core/status_macros.h"
#include "core/version.h"
#include "core/wire/frame_codec.h"
#include "core/wire/grpc_server.h"
#include "core/wire/grpc_status.h"
#include "core/wire/proto_convert.h"
#include "core/wire/protocol.h"
#include "core/wire/security.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "server/balancer.h"
#include "server/call_record.h"
#include "server/flow_hold.h"
#include "server/status_page.h"

namespace farcall::router {
namespace {

struct Shared {
  AgentPool* pool;
  int64_t max_call_bytes;
  HeaderLimits header_limits;
  const TokenTable* tokens;  // empty: calls need no token
  // Mints capabilities naming the caller for the agents (null: none).
  const CapabilitySigner* signer;
  // What calls carry to agents: "Bearer " + the router's own token, or
  // empty to pass on each caller's.
  std::string agent_authorization;
  DrainGate* gate;  // closed at shutdown
  LiveCalls* live;  // the calls in flight, for a drain that runs out
  // Each tenant's calls in flight through the router, and its default
  // limit (--tenant_max_calls; 0: none).
  CallerSlots* caller_slots;
  int64_t tenant_max_calls;
};

// The answer to a call that arrives while the router drains.
grpc::Status Draining() {
  return ToGrpcStatus(WithReason(
      absl::UnavailableError("this router is draining for shutdown and takes no new calls."),
      ErrorReason::kRouterDraining));
}

// Where a call may go, decided from its header alone.
struct Route {
  Platform platform;
  std::string handler;
  bool has_side_effect = false;  // never run twice: no retry elsewhere
  std::string call_id;           // with side effects: picks the agent (PickAgentFor)
  std::vector<std::shared_ptr<AgentHandle>> candidates;
  std::string authorization;  // sent to the agent; empty: none
  std::string principal;      // the caller's, for the capability
  // The caller's slot (--tenant_max_calls), given back when the call's
  // route goes (its reactor ends); null when none was taken.
  std::shared_ptr<void> slot;
};

// One of the caller's slots, or RESOURCE_EXHAUSTED naming its limit.
absl::StatusOr<std::shared_ptr<void>> TakeSlot(const Shared& shared, const std::string& principal,
                                               const TenantQuota& quota) {
  const CallerSlots::Limit limit{quota.max_calls > 0 ? quota.max_calls : shared.tenant_max_calls,
                                 quota.max_calls > 0};
  bool took = false;
  FARCALL_RETURN_IF_ERROR(shared.caller_slots->Take(principal, limit, &took));
  if (!took) return nullptr;
  CallerSlots* slots = shared.caller_slots;
  return std::shared_ptr<void>(nullptr, [slots, principal](void*) { slots->Give(principal); });
}

// A capability for `principal` to call `handler` on `agent`, as the
// metadata value; empty without a key.
std::string CapabilityFor(const Shared& shared, const std::string& principal,
                          const std::string& handler, const AgentHandle& agent) {
  if (shared.signer == nullptr) return "";
  return shared.signer->MintFor(principal, handler, agent.id());
}

// The credentials a forwarded call carries to `agent`: the router's token
// (or the caller's), and a capability naming the caller.
void AddAgentCredentials(const Shared& shared, const Route& route, const AgentHandle& agent,
                         grpc::ClientContext& ctx) {
  if (!route.authorization.empty()) ctx.AddMetadata(kAuthorizationKey, route.authorization);
  const std::string capability = CapabilityFor(shared, route.principal, route.handler, agent);
  if (!capability.empty()) ctx.AddMetadata(kCapabilityMetadataKey, capability);
}

// The live agents that may serve `route.handler` on the validated call's
// platform, into route.candidates; "gpu" takes cuda agents when any are
// live, else rocm ones (route.platform then says which).
absl::Status FindCandidates(const Shared& shared, const ValidatedCall& v, Route& route) {
  route.platform = v.platform;
  absl::StatusOr<std::vector<std::shared_ptr<AgentHandle>>> candidates =
      shared.pool->Candidates(v.platform, route.handler);
  if (v.any_gpu && absl::IsUnavailable(candidates.status())) {
    route.platform = Platform::kRocm;
    candidates = shared.pool->Candidates(Platform::kRocm, route.handler);
    if (absl::IsUnavailable(candidates.status())) candidates = NoLiveAgentError("gpu");
  }
  FARCALL_RETURN_IF_ERROR(candidates.status());
  route.candidates = *std::move(candidates);
  return absl::OkStatus();
}

// The agent that holds the resident arrays a header names ("" for none), or
// INVALID_ARGUMENT for residents of two agents.
absl::StatusOr<std::string> ResidentHolderOf(const v1::CallHeader& header) {
  std::vector<std::pair<std::string, std::string>> named;
  const std::map<uint32_t, std::string> args(header.resident_args().begin(),
                                             header.resident_args().end());
  for (const auto& [i, handle] : args) named.emplace_back(absl::StrCat("args[", i, "]"), handle);
  for (int k = 0; k < header.release_residents_size(); ++k) {
    named.emplace_back(absl::StrCat("release_residents[", k, "]"), header.release_residents(k));
  }
  return ResidentHolder(named);
}

std::string FirstResident(const v1::CallHeader& header) {
  if (!header.resident_args().empty()) {
    const std::map<uint32_t, std::string> args(header.resident_args().begin(),
                                               header.resident_args().end());
    return args.begin()->second;
  }
  return header.release_residents_size() > 0 ? header.release_residents(0) : "";
}

// Where the call may go; a refusal is counted in `record` by its reason.
absl::StatusOr<Route> RouteCall(const Shared& shared, const grpc::ByteBuffer& first,
                                const std::string& authorization, CallRecord& record) {
  // Before the header is even parsed: a caller without a token costs nothing.
  if (absl::Status s = shared.tokens->Authenticate(authorization); !s.ok()) {
    record.Refused("auth");
    return WithReason(s, ErrorReason::kAuthRefused);
  }
  v1::CallHeader header;
  absl::StatusOr<bool> found =
      DecodeMessageField(first, kHeaderField, &header, &shared.header_limits);
  if (!found.ok()) {
    record.Refused(found.status().code() == absl::StatusCode::kResourceExhausted ? "limit"
                                                                                 : "invalid");
    return found.status();
  }
  if (!*found) {
    record.Refused("invalid");
    return MissingHeaderError();
  }
  // Before anything about the call is checked: a token that may not call
  // this handler learns nothing else (not even whether it exists).
  std::string principal;
  TenantQuota quota;
  absl::Status allowed =
      shared.tokens->Authorize(authorization, header.handler(), &principal, &quota);
  // A known token's caller, refused a handler, is named in the audit line.
  record.Identify(header.call_id(), principal);
  if (!allowed.ok()) {
    record.Refused("auth");
    return WithReason(allowed, ErrorReason::kAuthRefused);
  }
  absl::StatusOr<std::shared_ptr<void>> slot = TakeSlot(shared, principal, quota);
  if (!slot.ok()) {
    record.Refused("limit");
    return slot.status();
  }
  absl::StatusOr<ValidatedCall> v =
      ValidateCall(DescriptorFromProto(header), shared.max_call_bytes, "router");
  if (!v.ok()) {
    if (v.status().code() == absl::StatusCode::kResourceExhausted) {
      record.Refused("limit");
    } else if (header.platforms_size() > 0 && !ParsePlatform(header.platforms(0))) {
      record.Refused("platform");
    } else {
      record.Refused("invalid");
    }
    return v.status();
  }
  Route r{v->platform,
          header.handler(),
          header.has_side_effect(),
          header.has_side_effect() ? header.call_id() : std::string(),
          {},
          shared.agent_authorization.empty() ? authorization : shared.agent_authorization,
          std::move(principal),
          *std::move(slot)};
  absl::StatusOr<std::string> holder_of = ResidentHolderOf(header);
  if (!holder_of.ok()) {
    record.Refused("invalid");
    return holder_of.status();
  }
  const std::string& holder = *holder_of;
  if (!holder.empty()) {
    // Only the agent that holds the call's residents can run it, serving or
    // draining: never another one, with fresh memory. It answers for the
    // handler itself.
    std::shared_ptr<AgentHandle> a = shared.pool->Holder(holder);
    if (a == nullptr) {
      record.Refused("no_agent");
      return ResidentLostError(
          FirstResident(header),
          absl::StrCat("no agent of this router with the id '", holder, "' answers"));
    }
    r.candidates = {std::move(a)};
    return r;
  }
  absl::Status found_agents = FindCandidates(shared, *v, r);
  if (!found_agents.ok()) record.Refused("no_agent");
  FARCALL_RETURN_IF_ERROR(found_agents);
  return r;
}

// The answer once no agent is left to try for `route` after `last` (the
// last agent's answer): what the pool says now, which knows that agents
// went away (a live agent of the platform without the handler: the
// contract's NOT_FOUND with the handlers there are), or else `last`. Never
// "no live agent" while one is live.
grpc::Status NothingLeftToTry(const Shared& shared, const Route& route, const grpc::Status& last) {
  absl::StatusOr<std::vector<std::shared_ptr<AgentHandle>>> now =
      shared.pool->Candidates(route.platform, route.handler);
  if (!now.ok()) return ToGrpcStatus(now.status());
  if (!last.ok()) return last;
  return ToGrpcStatus(NoLiveAgentError(PlatformName(route.platform)));
}

// An agent's answer as the caller gets it: CANCELLED means the caller
// cancelled, so an agent that ended the call by going away (its drain ran
// out, it crashed) is UNAVAILABLE to a caller that did not.
grpc::Status AsCallerSees(const grpc::Status& s, bool caller_cancelled) {
  if (s.error_code() != grpc::StatusCode::CANCELLED || caller_cancelled) return s;
  return ToGrpcStatus(absl::UnavailableError(
      "the agent ended the call without an answer (it shut down or went away); the caller did "
      "not cancel it."));
}

// Takes the next agent to try out of `route`, by the balancer's choice.
std::shared_ptr<AgentHandle> TakeAgent(Route& route) {
  if (route.candidates.empty()) return nullptr;
  std::shared_ptr<AgentHandle> a = route.call_id.empty()
                                       ? PickAgent(route.candidates)
                                       : PickAgentFor(route.call_id, route.candidates);
  std::erase(route.candidates, a);
  return a;
}

// Router.Execute: header first, then raw frames both ways, never more than
// one message per direction held here.
//
// The agent's stream (one Downstream per attempt) is driven from both sides:
// its reactions start writes to the caller, and the caller's reactions start
// writes and reads on it. gRPC asks for a hold on the stream for each flow
// of operations started outside its own reactions, taken before StartCall:
// one for the caller's frames going up (the write flow) and one for the
// agent's frames coming back (the read flow). Each is removed once, when
// its flow can start nothing more; the attempt's OnDone comes after both.
class ForwardingExecute final : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>,
                                public RefCounted,
                                public LiveCalls::Call {
 public:
  ForwardingExecute(Shared& shared, grpc::CallbackServerContext* ctx)
      : shared_(shared), server_ctx_(ctx), entered_(shared.gate->Enter()) {
    if (!entered_) {
      record_.Refused("draining");
      FinishUp(Draining());
      return;
    }
    shared_.live->Add(this);
    StartRead(&up_in_);
  }

  // The router's drain ran out: the agent's stream is cancelled (its
  // handler told to stop), and the caller gets `why` in place of what that
  // leaves; an answer the agent already gave goes on to the caller.
  void CutByDrain(const LiveCalls::Answers& answers) override {
    absl::MutexLock l(&mu_);
    if (finished_ || down_done_) return;
    cut_ = answers;
    if (down_ != nullptr) down_->ctx.TryCancel();
  }
  void Hold() override { Ref(); }
  void Release() override { Unref(); }

  void OnReadDone(bool ok) override {
    if (!routed_) {
      routed_ = true;
      if (!ok) {
        return FinishUp(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                     "the call ended before its header was sent."));
      }
      absl::StatusOr<Route> r = RouteCall(shared_, up_in_, AuthorizationOf(*server_ctx_),
                                          record_.From(server_ctx_->peer()));
      if (!r.ok()) return FinishUp(ToGrpcStatus(r.status()));
      route_ = std::move(*r);
      record_.Routed(route_.platform, route_.handler);
      return StartAttempt();
    }
    Downstream* down;
    {
      absl::MutexLock l(&mu_);
      // The agent's stream ended while this frame was awaited: the frame
      // has nowhere to go, and the call ends with the agent's status.
      if (!awaiting_caller_) return;
      awaiting_caller_ = false;
      down = down_;
    }
    if (ok) {
      // Until this write completes, only this thread may end the write
      // flow (awaiting_caller_ is clear): its hold keeps the stream for it.
      record_.Received(up_in_.Length());
      down->StartWrite(&up_in_);
    } else if (down->writes.Claim()) {
      down->StartWritesDone();
      down->RemoveHold();  // the write flow: nothing more goes up
    }
  }

  void OnWriteDone(bool ok) override {
    Downstream* down;
    {
      absl::MutexLock l(&mu_);
      up_write_pending_ = false;
      down = down_;
    }
    if (ok) {
      down->StartRead(&down_in_);  // the read flow's hold keeps the stream
    } else {
      down->ctx.TryCancel();
      down->reads.Release();
    }
    MaybeFinish();
  }

  void OnCancel() override {
    absl::MutexLock l(&mu_);
    cancelled_ = true;
    if (down_ != nullptr) down_->ctx.TryCancel();
  }

  void OnDone() override {
    if (entered_) {
      shared_.live->Remove(this);
      shared_.gate->Leave();
    }
    Unref();
  }

 private:
  // One attempt to reach one agent.
  struct Downstream final : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
    Downstream(ForwardingExecute* up, std::shared_ptr<AgentHandle> agent)
        : up(up), agent(std::move(agent)) {}
    void OnReadInitialMetadataDone(bool ok) override { up->OnAccepted(*this, ok); }
    void OnWriteDone(bool ok) override { up->OnFrameForwarded(*this, ok); }
    void OnReadDone(bool ok) override {
      // The agent's stream ended (it finished, or died): its status comes
      // in OnDone, which must not wait for a caller that sends no more.
      if (!ok) return up->DownstreamEnded(*this);
      up->ForwardResult();
    }
    void OnDone(const grpc::Status& s) override { up->OnAttemptDone(s); }

    ForwardingExecute* up;
    std::shared_ptr<AgentHandle> agent;
    grpc::ClientContext ctx;
    // The stream stays open while either flow goes on (server/flow_hold.h):
    // the caller's frames going to the agent, the agent's coming back.
    FlowHold<grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>> writes, reads;
  };

  void StartAttempt() {
    std::shared_ptr<AgentHandle> agent = TakeAgent(route_);
    if (agent == nullptr) {
      record_.Refused("no_agent");
      return FinishUp(NothingLeftToTry(shared_, route_, last_attempt_));
    }
    agent->inflight.fetch_add(1);
    agent->calls_total.fetch_add(1);
    record_.Attempt(agent);
    Ref();  // released in OnAttemptDone
    Downstream* down;
    {
      absl::MutexLock l(&mu_);
      attempts_.push_back(std::make_unique<Downstream>(this, agent));
      down = down_ = attempts_.back().get();
      down->ctx.set_deadline(server_ctx_->deadline());
      AddAgentCredentials(shared_, route_, *agent, down->ctx);
      if (cancelled_ || !cut_.may_have_run.ok()) down->ctx.TryCancel();
      awaiting_caller_ = down_reads_ended_ = false;
    }
    agent->generic->PrepareBidiStreamingCall(&down->ctx, kAgentExecuteMethod, grpc::StubOptions(),
                                             down);
    down->writes.Take(down);
    down->reads.Take(down);
    down->StartCall();
  }

  void OnAccepted(Downstream& down, bool ok) {
    if (!ok) {  // nothing will be started; OnAttemptDone follows with the reason
      down.writes.Release();
      down.reads.Release();
      return;
    }
    {
      absl::MutexLock l(&mu_);
      accepted_ = true;
    }
    record_.Received(up_in_.Length());
    down.StartWrite(&up_in_);  // the first frame, header included
    down.StartRead(&down_in_);
  }

  // A frame of the caller's reached the agent (or the stream broke).
  void OnFrameForwarded(Downstream& down, bool ok) {
    bool more;
    {
      absl::MutexLock l(&mu_);
      // Go on reading the caller while the agent still listens.
      more = ok && !down_reads_ended_;
      awaiting_caller_ = more;
    }
    if (!more) {
      down.writes.Release();
      return;
    }
    StartRead(&up_in_);  // the caller's next frame
  }

  // The agent's stream has no more frames: the read flow is over, and so is
  // the write flow if it only waits for the caller.
  void DownstreamEnded(Downstream& down) {
    down.reads.Release();
    bool end_writes;
    {
      absl::MutexLock l(&mu_);
      down_reads_ended_ = true;
      end_writes = awaiting_caller_;
      awaiting_caller_ = false;  // a frame still read from the caller is dropped
    }
    if (end_writes) down.writes.Release();
  }

  void ForwardResult() {
    {
      absl::MutexLock l(&mu_);
      up_write_pending_ = true;
    }
    record_.Sent(down_in_.Length());
    StartWrite(&down_in_);
  }

  void OnAttemptDone(const grpc::Status& s) {
    bool retry;
    std::shared_ptr<AgentHandle> agent;
    {
      absl::MutexLock l(&mu_);
      agent = down_->agent;
      // Nothing reached the agent: safe to try another one.
      retry = !accepted_ && !cancelled_ && cut_.may_have_run.ok() && !route_.has_side_effect &&
              NeverReachedAgent(s, down_->ctx);
      if (!retry) {
        down_done_ = true;
        final_ = s;
      }
    }
    agent->inflight.fetch_sub(1);
    if (retry) {
      shared_.pool->MarkDown(*agent, absl::StrCat("unreachable: ", s.error_message()));
      record_.Retried();
      last_attempt_ = s;
      StartAttempt();
    } else {
      MaybeFinish();
    }
    Unref();
  }

  // Ends the call once the agent's stream is done and no result is still
  // being written to the caller.
  void MaybeFinish() {
    grpc::Status s;
    {
      absl::MutexLock l(&mu_);
      if (!down_done_ || up_write_pending_) return;
      // The agent sends no frame back before it has the call, and gets the
      // caller's frames only after that (OnAccepted): a call it never
      // accepted never ran.
      const absl::Status& cut = accepted_ ? cut_.may_have_run : cut_.did_not_run;
      s = !cut.ok() && !final_.ok() ? ToGrpcStatus(cut) : AsCallerSees(final_, cancelled_);
    }
    FinishUp(s);
  }

  // The one way the call ends: recorded, then finished, once.
  void FinishUp(const grpc::Status& s) {
    {
      absl::MutexLock l(&mu_);
      if (finished_) return;
      finished_ = true;
    }
    record_.Finished(s);
    // The caller's slot goes back before it has its answer, so that its
    // next call finds it free.
    route_.slot.reset();
    Finish(s);
  }

  Shared& shared_;
  grpc::CallbackServerContext* server_ctx_;
  const bool entered_;  // through the drain gate
  CallRecord record_;
  bool routed_ = false;  // only touched by the upstream read chain
  Route route_;
  grpc::Status last_attempt_;  // the last agent's answer, when it was retried
  grpc::ByteBuffer up_in_;
  grpc::ByteBuffer down_in_;

  absl::Mutex mu_;
  std::vector<std::unique_ptr<Downstream>> attempts_ ABSL_GUARDED_BY(mu_);
  // The current attempt (owned by attempts_, so a pointer read under mu_
  // stays valid for the call's life).
  Downstream* down_ ABSL_GUARDED_BY(mu_) = nullptr;
  // A read of the caller's next frame is out, and the frame goes to the
  // agent; cleared by whoever takes that frame or ends the write flow.
  bool awaiting_caller_ ABSL_GUARDED_BY(mu_) = false;
  bool down_reads_ended_ ABSL_GUARDED_BY(mu_) = false;
  bool accepted_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool up_write_pending_ ABSL_GUARDED_BY(mu_) = false;
  bool down_done_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status final_ ABSL_GUARDED_BY(mu_);
  LiveCalls::Answers cut_ ABSL_GUARDED_BY(mu_);  // the answers when the drain cut the call
};

// Router.Call: one frame each way; the agent's answer is passed through.
class ForwardingCall final : public grpc::ServerUnaryReactor,
                             public RefCounted,
                             public LiveCalls::Call {
 public:
  ForwardingCall(Shared& shared, grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                 grpc::ByteBuffer* response)
      : shared_(shared),
        server_ctx_(ctx),
        entered_(shared.gate->Enter()),
        request_(request),
        response_(response) {
    if (!entered_) {
      record_.Refused("draining");
      FinishAndRecord(Draining());
      return;
    }
    shared_.live->Add(this);
    absl::StatusOr<Route> r = RouteCall(shared_, *request_, AuthorizationOf(*server_ctx_),
                                        record_.From(server_ctx_->peer()));
    if (!r.ok()) {
      FinishAndRecord(ToGrpcStatus(r.status()));
      return;
    }
    route_ = std::move(*r);
    record_.Routed(route_.platform, route_.handler);
    StartAttempt();
  }

  void OnCancel() override {
    absl::MutexLock l(&mu_);
    cancelled_ = true;
    if (client_ctx_ != nullptr) client_ctx_->TryCancel();
  }
  void OnDone() override {
    if (entered_) {
      shared_.live->Remove(this);
      shared_.gate->Leave();
    }
    Unref();
  }
  // As ForwardingExecute's: the agent's call is cancelled, and a failure
  // that leaves becomes the cut's answer (may have run: the request went
  // with the call).
  void CutByDrain(const LiveCalls::Answers& answers) override {
    absl::MutexLock l(&mu_);
    cut_ = answers;
    if (client_ctx_ != nullptr) client_ctx_->TryCancel();
  }
  void Hold() override { Ref(); }
  void Release() override { Unref(); }

 private:
  void StartAttempt() {
    absl::Status never_sent;
    {
      absl::MutexLock l(&mu_);
      never_sent = cut_.did_not_run;
    }
    if (!never_sent.ok()) return FinishAndRecord(ToGrpcStatus(never_sent));
    std::shared_ptr<AgentHandle> agent = TakeAgent(route_);
    if (agent == nullptr) {
      record_.Refused("no_agent");
      FinishAndRecord(NothingLeftToTry(shared_, route_, last_attempt_));
      return;
    }
    agent->inflight.fetch_add(1);
    agent->calls_total.fetch_add(1);
    record_.Attempt(agent);
    grpc::ClientContext* ctx;
    {
      absl::MutexLock l(&mu_);
      client_ctx_ = std::make_unique<grpc::ClientContext>();
      ctx = client_ctx_.get();
      ctx->set_deadline(server_ctx_->deadline());
      AddAgentCredentials(shared_, route_, *agent, *ctx);
      if (cancelled_ || !cut_.may_have_run.ok()) ctx->TryCancel();
    }
    Ref();
    agent->generic->UnaryCall(
        ctx, kAgentCallMethod, grpc::StubOptions(), request_, response_,
        [this, agent, ctx](grpc::Status s) {
          agent->inflight.fetch_sub(1);
          bool retry;
          absl::Status cut;
          {
            absl::MutexLock l(&mu_);
            cut = cut_.may_have_run;
            retry =
                !cancelled_ && cut.ok() && !route_.has_side_effect && NeverReachedAgent(s, *ctx);
          }
          if (retry) {
            shared_.pool->MarkDown(*agent, absl::StrCat("unreachable: ", s.error_message()));
            response_->Clear();
            record_.Retried();
            last_attempt_ = s;
            StartAttempt();
          } else {
            record_.Received(request_->Length());
            if (s.ok()) record_.Sent(response_->Length());
            bool caller_cancelled;
            {
              absl::MutexLock l(&mu_);
              caller_cancelled = cancelled_;
            }
            FinishAndRecord(!cut.ok() && !s.ok() ? ToGrpcStatus(cut)
                                                 : AsCallerSees(s, caller_cancelled));
          }
          Unref();
        });
  }

  void FinishAndRecord(const grpc::Status& s) {
    record_.Finished(s);
    route_.slot.reset();  // before the caller has its answer, as above
    Finish(s);
  }

  Shared& shared_;
  grpc::CallbackServerContext* server_ctx_;
  const bool entered_;  // through the drain gate
  CallRecord record_;
  const grpc::ByteBuffer* request_;
  grpc::ByteBuffer* response_;
  Route route_;
  grpc::Status last_attempt_;  // the last agent's answer, when it was retried
  absl::Mutex mu_;
  std::unique_ptr<grpc::ClientContext> client_ctx_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  LiveCalls::Answers cut_ ABSL_GUARDED_BY(mu_);  // the answers when the drain cut the call
};

class RouterService final
    : public v1::Router::WithRawCallbackMethod_Execute<
          v1::Router::WithRawCallbackMethod_Call<v1::Router::WithCallbackMethod_ListAgents<
              v1::Router::WithCallbackMethod_Resolve<v1::Router::Service>>>> {
 public:
  explicit RouterService(Shared shared) : shared_(shared) {}

  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* Execute(
      grpc::CallbackServerContext* ctx) override {
    return new ForwardingExecute(shared_, ctx);
  }
  grpc::ServerUnaryReactor* Call(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                 grpc::ByteBuffer* response) override {
    return new ForwardingCall(shared_, ctx, request, response);
  }
  // The agents a call may go to, after the checks a routed call's header
  // gets before an agent is chosen; the same codes and messages.
  grpc::ServerUnaryReactor* Resolve(grpc::CallbackServerContext* ctx,
                                    const v1::ResolveRequest* request,
                                    v1::ResolveResponse* response) override {
    grpc::ServerUnaryReactor* r = ctx->DefaultReactor();
    const absl::Status s = ResolveCall(AuthorizationOf(*ctx), *request, *response);
    if (s.ok()) {
      CountResolve(response->platform(), request->handler(), s.code());
    } else {
      CountResolve("-", "-", s.code());
    }
    r->Finish(ToGrpcStatus(s));
    return r;
  }

  grpc::ServerUnaryReactor* ListAgents(grpc::CallbackServerContext* ctx,
                                       const v1::ListAgentsRequest* request,
                                       v1::ListAgentsResponse* response) override {
    grpc::ServerUnaryReactor* r = ctx->DefaultReactor();
    if (absl::Status a = shared_.tokens->Authenticate(AuthorizationOf(*ctx)); !a.ok()) {
      r->Finish(ToGrpcStatus(a));
      return r;
    }
    if (!request->refresh()) {
      *response = shared_.pool->List();
      r->Finish(grpc::Status::OK);
      return r;
    }
    // A refresh answers once every agent has answered a probe; nothing
    // waits for them meanwhile.
    AgentPool* pool = shared_.pool;
    pool->ProbeAllAsync([pool, r, response] {
      *response = pool->List();
      r->Finish(grpc::Status::OK);
    });
    return r;
  }

 private:
  absl::Status ResolveCall(const std::string& authorization, const v1::ResolveRequest& request,
                           v1::ResolveResponse& response) {
    // Bounded before anything is done with it, as a call header's names are.
    FARCALL_RETURN_IF_ERROR(
        CheckNameLimits(request.handler(), request.platform(), shared_.header_limits));
    // Authorized first, as a call is.
    std::string principal;
    if (absl::Status s = shared_.tokens->Authorize(authorization, request.handler(), &principal);
        !s.ok()) {
      return WithReason(s, ErrorReason::kAuthRefused);
    }
    CallDescriptor call;
    call.handler = request.handler();
    call.platforms = {request.platform()};
    FARCALL_ASSIGN_OR_RETURN(ValidatedCall v, ValidateCall(call));
    Route route;
    route.handler = request.handler();
    FARCALL_RETURN_IF_ERROR(FindCandidates(shared_, v, route));
    // Least loaded first (the agent's own count at the last probe, or the
    // calls this router forwards there now if more); the pool's order among
    // equals.
    std::vector<std::pair<int64_t, std::shared_ptr<AgentHandle>>> by_load;
    for (std::shared_ptr<AgentHandle>& a : route.candidates) by_load.emplace_back(a->load(), a);
    std::stable_sort(by_load.begin(), by_load.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [load, a] : by_load) {
      v1::ResolvedAgent* out = response.add_agents();
      out->set_address(a->address);
      out->set_agent_id(a->id());
      out->set_inflight_calls(load);
      out->set_capability(CapabilityFor(shared_, principal, request.handler(), *a));
    }
    response.set_platform(std::string(PlatformName(route.platform)));
    response.set_valid_for_ms(absl::ToInt64Milliseconds(shared_.pool->probe_interval()));
    return absl::OkStatus();
  }

  Shared shared_;
};

}  // namespace

struct RouterServer::Impl {
  TokenTable tokens;
  CallerSlots caller_slots{"through this router"};
  std::optional<CapabilitySigner> signer;
  DrainGate gate;  // before the server: its calls use it
  LiveCalls live;  // likewise
  std::unique_ptr<AgentPool> pool;
  // After the pool: its pages read the pool, so it goes first.
  std::unique_ptr<metrics::MetricsServer> metrics;
  std::unique_ptr<RouterService> service;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
  absl::Duration drain;
  absl::Time started = absl::Now();
};

RouterServer::RouterServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RouterServer::~RouterServer() { Shutdown(); }

absl::StatusOr<std::unique_ptr<RouterServer>> RouterServer::Start(Options options) {
  if (options.agents.empty()) {
    return absl::InvalidArgumentError("the router needs at least one agent (--agents).");
  }
  auto impl = std::make_unique<Impl>();
  ExportRouterSeries();
  metrics::ExportBuildInfo("farcall-router", Version());
  impl->tokens = std::move(options.tokens);
  impl->signer = std::move(options.signer);
  SetRouterTenantLabels(options.metrics_max_tenants, impl->tokens.principals());
  impl->pool = std::make_unique<AgentPool>(options.agents, options.pool);
  impl->pool->ProbeAll();
  if (!options.metrics_listen.empty()) {
    Impl* self = impl.get();
    std::map<std::string, metrics::PageSource> pages;
    pages["/"] = [] { return metrics::Page{"text/html; charset=utf-8", StatusHtml()}; };
    pages["/status.json"] = [self] {
      RouterStatus r{Version(), self->started, self->gate.draining()};
      return metrics::Page{"application/json", StatusJson(r, self->pool->Status(), absl::Now())};
    };
    FARCALL_ASSIGN_OR_RETURN(
        impl->metrics,
        metrics::MetricsServer::Start(options.metrics_listen, pages, options.metrics_access));
  }
  impl->service = std::make_unique<RouterService>(
      Shared{impl->pool.get(), options.max_call_bytes, options.header_limits, &impl->tokens,
             impl->signer ? &*impl->signer : nullptr,
             options.agent_token.empty() ? std::string()
                                         : absl::StrCat(kBearerPrefix, options.agent_token),
             &impl->gate, &impl->live, &impl->caller_slots, options.tenant_max_calls});

  FARCALL_ASSIGN_OR_RETURN(RunningServer running,
                           StartGrpcServer(options.listen, impl->service.get(), options.grpc_limits,
                                           "farcall-router", options.credentials));
  impl->server = std::move(running.server);
  impl->port = running.port;
  impl->drain = options.grpc_limits.drain;
  impl->pool->StartProbing();
  return std::unique_ptr<RouterServer>(new RouterServer(std::move(impl)));
}

int RouterServer::port() const { return impl_->port; }
int RouterServer::metrics_port() const { return impl_->metrics ? impl_->metrics->port() : 0; }
AgentPool& RouterServer::pool() { return *impl_->pool; }

void RouterServer::Shutdown() {
  if (impl_->server == nullptr) return;
  SetRouterDraining(true);
  // Its clients' connections stay open for a second of NOT_SERVING, then
  // GOAWAY moves them to another router while calls in flight finish.
  LiveCalls& live = impl_->live;
  const absl::Duration drain = impl_->drain;
  const int cut = StopGrpcServer(impl_->server.get(), impl_->gate, drain, absl::Seconds(1), nullptr,
                                 [&live, drain] { live.CutAll(DrainCutAnswers("router", drain)); });
  if (cut > 0) log::Warning(DrainCutLine(cut, impl_->drain));
  impl_->server.reset();
}

}  // namespace farcall::router
