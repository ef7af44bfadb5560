// The agent's reactors (Execute, Call, Describe): they move frames between
// gRPC and AgentCall and run handlers on the worker pool. AgentServer
// (agent_server.cc) starts them; agent_reactors.h is what the two share.
#include "device_agents/agent_reactors.h"

#include <algorithm>
#include <atomic>
#include <functional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/error_reason.h"
#include "core/log.h"
#include "core/metrics.h"
#include "core/ref_counted.h"
#include "core/refusal_audit.h"
#include "core/status_macros.h"
#include "core/version.h"
#include "core/wire/grpc_server.h"
#include "core/wire/grpc_status.h"
#include "core/wire/protocol.h"
#include "core/wire/security.h"
#include "device_agents/agent_metrics.h"
#include "device_agents/fault_injection.h"
#include "device_agents/idle_watchdog.h"
#include "device_agents/worker_pool.h"
#include "farcall/v1/farcall.grpc.pb.h"
#include "grpc/grpc.h"
#include "grpcpp/grpcpp.h"

namespace farcall::agent {
namespace {

// The answer to a call that arrives while the agent drains: UNAVAILABLE,
// without the agent's id, so that a router sends it to another agent.
grpc::Status Draining() {
  Metrics().refused.With({"draining", kNoTenantLabel}).Increment();
  return ToGrpcStatus(WithReason(
      absl::UnavailableError("this agent is draining for shutdown and takes no new calls."),
      ErrorReason::kAgentDraining));
}

// The answer to a call cancelled while it waited for memory.
absl::Status CancelledWhileWaiting() {
  return absl::CancelledError("the call was cancelled while waiting for memory.");
}

// What a call presents to prove who calls: its bearer token, or a
// capability a router minted for it.
struct Credentials {
  std::string authorization;
  std::string capability;
};

Credentials CredentialsOf(const grpc::ServerContextBase& ctx) {
  return {AuthorizationOf(ctx), CapabilityOf(ctx)};
}

// The capability the call presents, verified; none when it presents none
// or this agent takes none (it has no key): then its token decides. Where
// this agent requires tokens, a capability must name a caller: one from a
// router that authenticates no one would let anyone in.
absl::StatusOr<std::optional<Capability>> VerifiedCapability(const AgentState& state,
                                                             const Credentials& credentials) {
  if (!state.verifier.has_value() || credentials.capability.empty()) return std::nullopt;
  VerifyNote note;
  absl::StatusOr<Capability> c = state.verifier->Verify(credentials.capability, absl::Now(), &note);
  if (!c.ok()) {
    Metrics().capability_checks.With({CapabilityRefusalName(note.refusal)}).Increment();
    return c.status();
  }
  if (c->principal.empty() && state.tokens.required()) {
    Metrics().capability_checks.With({"no_principal"}).Increment();
    return absl::UnauthenticatedError(
        "the call's capability names no caller (its router authenticates none), and this agent "
        "requires tokens.");
  }
  Metrics().capability_checks.With({note.cached ? "cached" : "verified"}).Increment();
  return std::optional<Capability>(*std::move(c));
}

// Who may Describe the agent: a caller with a known token, or with a
// capability for this agent (for any handler: what a client a router sent
// here asks before its first call).
absl::Status DescribeAllowed(const AgentState& state, const Credentials& credentials) {
  absl::StatusOr<std::optional<Capability>> c = VerifiedCapability(state, credentials);
  absl::Status s = !c.ok()          ? c.status()
                   : c->has_value() ? CheckCapabilityAgent(**c, state.agent_id())
                                    : state.tokens.Authenticate(credentials.authorization);
  return WithReason(std::move(s), ErrorReason::kAuthRefused);
}

// Checks the caller's capability or token, parses the call's first frame,
// checks that the caller may call its handler, and only then validates the
// call: a caller that may not call a handler learns nothing about it
// (whether it exists, which platforms and specs it takes). A capability,
// where this agent has the key, stands in for a token: it names the caller
// (its principal), the handler and this agent. A refusal is counted by its
// reason.
absl::Status Accept(const AgentState& state, const Credentials& credentials,
                    const grpc::ByteBuffer& first, AgentCall& call) {
  ReachedPhase(CallPhase::kHeader);
  auto refused = [&call](absl::Status s) {
    call.set_refused("auth");
    return WithReason(std::move(s), ErrorReason::kAuthRefused);
  };
  absl::StatusOr<std::optional<Capability>> verified = VerifiedCapability(state, credentials);
  if (!verified.ok()) return refused(verified.status());
  const std::optional<Capability>& capability = *verified;
  if (!capability.has_value()) {
    if (absl::Status s = state.tokens.Authenticate(credentials.authorization); !s.ok()) {
      return refused(s);
    }
  }
  // A call refused on its own content: a limit, or an invalid call (a
  // malformed header, an unknown handler, a call that fails validation).
  // Not the agent's own failures (every device failed: UNAVAILABLE), which
  // stay a warning each.
  auto limit = [&call](absl::Status s) {
    switch (s.code()) {
      case absl::StatusCode::kResourceExhausted:
        call.set_refused("limit");
        break;
      case absl::StatusCode::kInvalidArgument:
      case absl::StatusCode::kNotFound:
      case absl::StatusCode::kFailedPrecondition:
      case absl::StatusCode::kOutOfRange:
        call.set_refused("invalid");
        break;
      default:
        break;
    }
    return s;
  };
  if (absl::Status s = call.ReadHeader(first); !s.ok()) return limit(s);
  std::string principal;
  TenantQuota quota;  // a capability's caller has the agent's flags
  if (capability.has_value()) {
    absl::Status s = CheckCapabilityScope(*capability, call.handler_name(), state.agent_id());
    if (!s.ok()) return refused(s);
    principal = capability->principal;
  } else if (absl::Status s = state.tokens.Authorize(credentials.authorization, call.handler_name(),
                                                     &principal, &quota);
             !s.ok()) {
    // A known token's caller, refused a handler, is named in the audit line.
    if (!principal.empty()) call.set_principal(std::move(principal), {});
    return refused(s);
  }
  call.set_principal(std::move(principal), quota);
  if (absl::Status s = call.TakeCallerSlot(*state.caller_slots); !s.ok()) return limit(s);
  return limit(call.Validate());
}

// What the two reactors share: the call, its cancellation and its wait for
// the budget, the drain gate and the idle watchdog. `GrpcReactor` is gRPC's
// reactor type of the RPC.
template <class GrpcReactor>
class AgentReactor : public GrpcReactor, public LiveCall {
 public:
  void OnCancel() override {
    caller_gone_ = true;
    cancel_.Cancel();
    budget_.Withdraw(*shared_.state.admission);
  }
  void OnDone() override {
    shared_.live.Remove(this);
    if (shared_.watchdog != nullptr) shared_.watchdog->Remove(this);
    bool leave = entered_;
    {
      // A call the drain cut whose handler still runs stays in the gate
      // until it returns (SettleCut): the agent's state must outlive it.
      absl::MutexLock l(&run_mu_);
      if (run_ == Run::kCut) {
        leave_at_settle_ = entered_;
        leave = false;
      }
    }
    if (leave) shared_.gate.Leave();
    Resume();  // nothing waits on the client any more
    Unref();
  }

 protected:
  AgentReactor(Shared& shared, grpc::CallbackServerContext* ctx)
      : shared_(shared),
        call_(std::make_unique<AgentCall>(shared.state, ctx->peer())),
        entered_(shared.gate.Enter()) {
    // The caller's deadline, when sooner than --max_call_seconds: a handler
    // still running past it is stuck (ctx.deadline in Python handlers).
    cancel_.SetDeadline(absl::Now() + shared.state.config.max_call_time);
    if (ctx->deadline() != std::chrono::system_clock::time_point::max()) {
      caller_deadline_ = absl::FromChrono(ctx->deadline());
      cancel_.SetCallerDeadline(caller_deadline_);
    }
  }
  // Ends the call with `s`: records it, frees its memory, finishes the RPC.
  virtual void FinishWith(const absl::Status& s) = 0;
  // Records the call's end as `s` (with `response`, the unary answer, when
  // there is one) and frees its memory: what every end does before, or
  // without, finishing the RPC.
  void Settle(const absl::Status& s, const grpc::ByteBuffer* response) {
    call_->RecordOutcome(s, response, CallerGone());
    shared_.Release(std::move(call_));  // frees the call's memory now, not at OnDone
    SetHoldsBudget(false);
  }
  // Settles a call that the drain cut (CutByDrain) as `s`, once its handler
  // returned; the RPC is finished already.
  void SettleCut(const absl::Status& s) {
    Settle(s, nullptr);
    bool leave;
    {
      absl::MutexLock l(&run_mu_);
      leave = leave_at_settle_;
    }
    if (leave) shared_.gate.Leave();
  }

  // The handler's run on the workers, which a drain that runs out may cut:
  // BeginRun before the handler is handed to them, EndRun once it returned.
  // EndRun is false when the drain cut the call meanwhile: it was answered
  // then, and what the handler returned goes to no one (SettleCut).
  void BeginRun() {
    absl::MutexLock l(&run_mu_);
    run_ = Run::kRunning;
  }
  bool EndRun() {
    absl::MutexLock l(&run_mu_);
    const bool cut = run_ == Run::kCut;
    run_ = Run::kNone;
    return !cut;
  }
  absl::Status cut_status() {
    absl::MutexLock l(&run_mu_);
    return cut_;
  }
  // A call whose handler runs is answered `why` at once, and its handler
  // told to stop (the cancellation it may watch); one that waits for the
  // budget or for its client to send is ended as the idle watchdog ends
  // it. Others (a device step, an answer on its way to its client) are left
  // to end as they will, or to gRPC's shutdown.
  void CutByDrain(const LiveCalls::Answers& answers) override {
    bool running = false;
    {
      absl::MutexLock l(&run_mu_);
      if (run_ == Run::kRunning) {
        run_ = Run::kCut;
        cut_ = answers.may_have_run;
        running = true;
      }
    }
    if (!running) {
      // Waiting for the budget or for its inputs: its handler has not run.
      EndWaiting(answers.did_not_run);
      return;
    }
    cancel_.Cancel();
    this->Finish(ToGrpcStatus(answers.may_have_run));
  }
  // What the caller gets instead of an OK answer that comes after its
  // deadline passed or it cancelled the call (gRPC answers it so); OK
  // while the caller still waits.
  absl::Status CallerGone() const {
    if (absl::Now() >= caller_deadline_) {
      return absl::DeadlineExceededError(
          "the handler ended after its caller's deadline; the caller got DEADLINE_EXCEEDED.");
    }
    if (caller_gone_) {  // gRPC's cancel: not the agent's own --max_call_seconds
      return absl::CancelledError(
          "the handler ended after its caller cancelled the call; its answer went to no one.");
    }
    return absl::OkStatus();
  }
  // Refuses a call that arrived while the agent drains. True if it did (the
  // constructor then returns).
  bool RefusedWhileDraining() {
    if (entered_) return false;
    call_.reset();
    this->Finish(Draining());
    return true;
  }
  void Watch() {
    shared_.live.Add(this);
    if (shared_.watchdog != nullptr) shared_.watchdog->Add(this);
  }
  // While the agent drains it still takes the calls that name its resident
  // arrays, so that their clients can move them: enters the gate for one
  // whose first message's header names any.
  void EnterForResidents(const grpc::ByteBuffer& first) {
    if (entered_) return;
    v1::CallHeader h;
    absl::StatusOr<bool> found =
        DecodeMessageField(first, kHeaderField, &h, &shared_.state.config.header_limits);
    if (!found.ok() || !*found || !AgentCall::NamesResidents(h)) return;
    shared_.gate.EnterWhileDraining();
    entered_ = true;
    Metrics().resident_calls_while_draining.With({}).Increment();
  }
  // Waits for the call's bytes of the budget, then runs `admitted` (on the
  // thread that freed them, or a worker); a call cancelled while it waits
  // ends there.
  // A call that waits past --max_call_seconds is ended there (the watchdog
  // asks); one the client cancels, too.
  void AdmitThen(std::function<void()> admitted) {
    tenant_ = call_->principal();  // known by now (Accept)
    Ref();                         // released once admitted, or when the wait is withdrawn
    AwaitClient(Wait::kBudget);
    budget_.Admit(
        *shared_.state.admission, call_->footprint(), call_->budget_tenant(),
        [this, admitted = std::move(admitted)] {
          call_->Admitted();
          if (Resume()) {
            admitted();
          } else {
            // The watchdog (or a drain) ended the wait as it was admitted:
            // too late to withdraw, so it ends here, as it was ended.
            absl::Status ended = EndedWith();
            FinishWith(!ended.ok() ? ended : MaxCallTimeError(shared_.state.config.max_call_time));
          }
          Unref();
        },
        [this] {
          absl::Status why;
          {
            absl::MutexLock l(&queued_mu_);
            why = queued_end_;
          }
          FinishWith(why.ok() ? CancelledWhileWaiting() : why);
          Unref();
        },
        shared_.Elsewhere(tenant_));
  }
  void EndQueued(const absl::Status& error) override {
    {
      absl::MutexLock l(&queued_mu_);
      queued_end_ = error;
    }
    budget_.Withdraw(*shared_.state.admission);
  }

  Shared& shared_;
  std::unique_ptr<AgentCall> call_;
  std::string tenant_;  // its caller, for its turns on the workers (AdmitThen)
  CancellationToken cancel_;
  BudgetWait budget_;
  absl::Mutex queued_mu_;
  absl::Status queued_end_ ABSL_GUARDED_BY(queued_mu_);  // why the wait was ended
  bool entered_;  // through the drain gate (set once, before the call's first read)
  enum class Run { kNone, kRunning, kCut };
  absl::Mutex run_mu_;
  Run run_ ABSL_GUARDED_BY(run_mu_) = Run::kNone;
  absl::Status cut_ ABSL_GUARDED_BY(run_mu_);  // the answer a cut call got
  // OnDone came while the cut call's handler ran: SettleCut leaves the gate.
  bool leave_at_settle_ ABSL_GUARDED_BY(run_mu_) = false;
  absl::Time caller_deadline_ = absl::InfiniteFuture();
  std::atomic<bool> caller_gone_{false};  // gRPC cancelled the call (OnCancel)
};

// Streamed call: reads frames until half-close, runs the handler on the
// pool, then writes the results one frame at a time.
class ExecuteReactor final
    : public AgentReactor<grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>> {
 public:
  ExecuteReactor(Shared& shared, grpc::CallbackServerContext* ctx)
      : AgentReactor(shared, ctx), ctx_(ctx), credentials_(CredentialsOf(*ctx)) {
    // While draining, the first message decides (EnterForResidents).
    ctx->AddInitialMetadata(kAgentIdMetadataKey, shared.state.agent_id());
    StartSendInitialMetadata();
    Watch();
    AwaitClient(Wait::kSend);
    StartRead(&in_);
  }

  void OnReadDone(bool ok) override {
    if (!Resume()) return;  // ended as idle; nothing of the call is left
    if (!begun_ && ok) EnterForResidents(in_);
    if (!begun_ && !entered_) {  // the agent drains, and the call names no resident
      call_.reset();
      Finish(Draining());
      return;
    }
    if (!ok) {  // half-close, or the call broke
      if (ctx_->IsCancelled() || cancel_.cancelled()) {
        // Not a half-close: free the inputs now instead of running.
        return FinishWith(absl::CancelledError("the call was cancelled while sending its inputs."));
      }
      SetMoving(false);  // the inputs are in; the handler runs next
      absl::Status s = call_->EndOfInputs();
      if (!s.ok()) return FinishWith(s);
      Ref();
      BeginRun();
      shared_.RunHandler(*call_, cancel_, [this] {
        absl::Status run = call_->Run(cancel_);
        if (!EndRun()) {
          SettleCut(cut_status());
        } else if (run.ok()) {
          WriteNext();
        } else {
          FinishWith(run);
        }
        Unref();
      });
      return;
    }
    if (!begun_) {
      begun_ = true;
      absl::Status s = Accept(shared_.state, credentials_, in_, *call_);
      if (!s.ok()) return FinishWith(s);
      CallLedger::Claim claim = call_->ClaimRun();
      if (!claim.run) return Replay(std::move(claim));
      return AdmitThen([this] {
        SetHoldsBudget(true);
        SetMoving(true);
        shared_.DeviceStep(*this, tenant_, [this] {
          absl::Status a = call_->Allocate();
          if (a.ok() && call_->ucx()) {
            a = absl::FailedPreconditionError(
                "a UCX call goes as a unary Call; Execute carries tensors in its messages.");
          }
          if (a.ok()) return TakeFrame();
          FinishWith(a);
        });
      });
    }
    shared_.DeviceStep(*this, tenant_, [this] { TakeFrame(); });
  }

  void OnWriteDone(bool ok) override {
    if (!Resume()) return;  // ended as idle
    if (!ok) {
      return FinishWith(
          absl::CancelledError("the caller went away while results were being sent."));
    }
    if (replaying_) return FinishWith(absl::OkStatus());
    call_->ReachedResultPhases(/*all_sent=*/false);
    shared_.DeviceStep(*this, tenant_, [this] { WriteNext(); });
  }

 private:
  // Called by the IdleWatchdog, which holds a reference.
  void EndIdle(Wait waited, const absl::Status& error) override {
    // A write blocked on a client that reads nothing completes only when the
    // stream goes. Cancelled before Finish, so that the context is still the
    // call's (OnDone cannot run before Finish).
    if (waited == Wait::kRead) ctx_->TryCancel();
    // The pending read of a silent client ends with Finish.
    FinishWith(error);
  }

  // Answers a repeat of a call with side effects that ran already: the
  // answer it got when that was kept (the rest of the inputs is not read),
  // else the ledger's status.
  void Replay(CallLedger::Claim claim) {
    if (!claim.answer.has_value() || !claim.status.ok()) return FinishWith(claim.status);
    replaying_ = true;
    out_ = *claim.answer;
    AwaitClient(Wait::kRead);
    StartWrite(&out_);
  }

  // Takes the chunks of the frame in `in_`, then reads the next frame.
  void TakeFrame() {
    absl::Status s = call_->OnRequestFrame(in_);
    Progress(static_cast<int64_t>(in_.Length()));
    in_.Clear();  // drop the slices now: the bytes are in the tensors
    if (!s.ok()) return FinishWith(s);
    AwaitClient(Wait::kSend);
    StartRead(&in_);
  }

  void WriteNext() {
    out_.Clear();
    absl::StatusOr<bool> more =
        call_->NextResponseFrame(shared_.state.config.response_chunk_bytes, &out_);
    if (!more.ok()) return FinishWith(more.status());
    if (!*more) {
      call_->ReachedResultPhases(/*all_sent=*/true);
      return FinishWith(absl::OkStatus());
    }
    SetMoving(true);
    Progress(static_cast<int64_t>(out_.Length()));
    AwaitClient(Wait::kRead);
    StartWrite(&out_);
  }

  void FinishWith(const absl::Status& s) override {
    Settle(s, nullptr);
    Finish(ToGrpcStatus(s));
  }

  grpc::CallbackServerContext* ctx_;
  const Credentials credentials_;  // the call's bearer token or capability
  bool replaying_ = false;         // answering with a kept answer
  bool begun_ = false;             // only touched by the read chain
  grpc::ByteBuffer in_;
  grpc::ByteBuffer out_;
};

// Unary call: the request and the response are one frame each.
class CallReactor final : public AgentReactor<grpc::ServerUnaryReactor> {
 public:
  CallReactor(Shared& shared, grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
              grpc::ByteBuffer* response)
      : AgentReactor(shared, ctx), response_(response), grpc_call_(ctx->c_call()) {
    // The answer may sit unread after Finish, when the context may already
    // serve another call; the core call, held here, is this call's for good.
    grpc_call_ref(grpc_call_);
    EnterForResidents(*request);
    if (RefusedWhileDraining()) return;
    Watch();
    // In trailing metadata too: an error answer is "trailers only", and the
    // router must still see that the agent answered.
    const std::string id = shared.state.agent_id();
    ctx->AddInitialMetadata(kAgentIdMetadataKey, id);
    ctx->AddTrailingMetadata(kAgentIdMetadataKey, id);
    absl::Status s = Accept(shared.state, CredentialsOf(*ctx), *request, *call_);
    if (!s.ok()) {
      FinishWith(s);
      return;
    }
    CallLedger::Claim claim = call_->ClaimRun();
    if (!claim.run) {
      if (claim.answer.has_value()) *response_ = *std::move(claim.answer);
      FinishWith(claim.status);
      return;
    }
    // A call with side effects is accepted now, not with its answer, so that
    // a router never takes an agent that failed while running it for one
    // that never had it (and runs it again). Other calls may run again
    // harmlessly, and save the extra message.
    if (call_->has_side_effect()) StartSendInitialMetadata();
    AdmitThen([this, request] {
      shared_.DeviceStep(*this, tenant_, [this, request] { TakeRequest(*request); });
    });
  }

 private:
  ~CallReactor() override { grpc_call_unref(grpc_call_); }

  // The caller took no answer for the idle timeout: the answer (up to
  // --max_message_bytes) is dropped with the call (only ever after Finish).
  // A UCX call that waited that long for its client's bytes, or for it to
  // take the results, ends with `error`.
  void EndIdle(Wait, const absl::Status& error) override {
    {
      absl::MutexLock l(&ucx_mu_);
      if (ucx_phase_) {
        ucx_idle_error_ = error;
        call_->CancelUcx();  // its end finishes the call
        return;
      }
    }
    grpc_call_cancel(grpc_call_, nullptr);
  }

  void OnCancel() override {
    AgentReactor::OnCancel();
    absl::MutexLock l(&ucx_mu_);
    if (ucx_phase_) call_->CancelUcx();
  }

  // Places the request's tensors, then runs the handler on its pool.
  void TakeRequest(const grpc::ByteBuffer& request) {
    absl::Status a = call_->Allocate();
    if (a.ok()) a = call_->OnRequestFrame(request);
    if (a.ok() && call_->ucx()) return ReceiveOverUcx();
    if (a.ok()) a = call_->EndOfInputs();
    if (a.ok()) a = call_->CheckFitsOneMessage();
    if (!a.ok()) return FinishWith(a);
    // A quick handler's small call costs less than the hand-off to a worker
    // and back would.
    if (call_->RunsInline()) return RunAndAnswer();
    RunOnWorkers();
  }

  void RunOnWorkers() {
    Ref();
    BeginRun();
    shared_.RunHandler(*call_, cancel_, [this] {
      RunAndAnswer();
      Unref();
    });
  }

  // Runs the handler, then answers (unless the drain cut the call
  // meanwhile: it was answered then).
  void RunAndAnswer() {
    absl::Status run = call_->Run(cancel_);
    if (!EndRun()) return SettleCut(cut_status());
    if (run.ok() && call_->ucx()) return SendOverUcx();
    if (run.ok()) call_->ReachedResultPhasesAtOnce();
    if (run.ok()) run = call_->NextResponseFrame(0, response_).status();
    FinishWith(run);
  }

  // A UCX call's args: the client sends them once told to; each piece that
  // lands counts as progress for the idle watchdog. The phase's end comes on
  // the UCX worker's thread, which hands only the handler to a worker (on a
  // device, the end comes on a worker, after the pieces' device copies).
  void ReceiveOverUcx() {
    Ref();  // until the inputs ended
    // Like a stream's: its budget is held while its client sends (or not).
    SetHoldsBudget(true);
    SetMoving(true);
    AwaitClient(Wait::kSend);
    absl::MutexLock l(&ucx_mu_);  // the end waits for this phase to begin
    ucx_phase_ = true;
    call_->StartUcxInputs(
        [this](int64_t data_bytes) {
          ReachedPhase(CallPhase::kUpload);
          // Only tensor bytes are progress: a MAC now and then would
          // otherwise hold the budget for --max_call_seconds.
          if (data_bytes == 0) return;
          Progress(data_bytes);
          AwaitClient(Wait::kSend);
        },
        [this](const absl::Status& s) {
          SetMoving(false);
          absl::Status why = s;
          // Bytes that failed their check were not the client's: its args
          // did not arrive, and it may send them again another way.
          if (!s.ok() && (absl::IsUnavailable(s) || UcxIntegrityFailure(s))) {
            why =
                WithReason(absl::UnavailableError(absl::StrCat(kUcxInputsFailed, " (", s.message(),
                                                               "); the handler did not run.")),
                           ErrorReason::kInputsNotDelivered);
          }
          AfterUcx(why, "while sending its inputs", [this] {
            absl::Status in = call_->EndOfInputs();
            if (!in.ok()) return FinishWith(in);
            // A quick handler's small call runs here, as
            // it would on the gRPC thread.
            if (call_->RunsInline()) return RunAndAnswer();
            RunOnWorkers();
          });
          Unref();
        },
        shared_.Elsewhere(tenant_));
    if (cancel_.cancelled()) call_->CancelUcx();  // cancelled before the phase began
  }

  // A UCX call's results, then the answer without them (from the UCX
  // worker's thread: answering does not block).
  void SendOverUcx() {
    Ref();  // until the results were taken
    SetMoving(true);
    AwaitClient(Wait::kRead);
    absl::MutexLock l(&ucx_mu_);
    ucx_phase_ = true;
    call_->StartUcxResults(
        [this](int64_t data_bytes) {
          // A result piece or its MAC went: the first, then the second.
          const int n = ++result_transfers_;
          ReachedPhase(CallPhase::kResultFirst);
          if (n >= 2) ReachedPhase(CallPhase::kResultMid);
          if (data_bytes == 0) return;  // only tensor bytes are progress
          Progress(data_bytes);
          AwaitClient(Wait::kRead);
        },
        [this](const absl::Status& s) {
          AfterUcx(s, "while taking its results", [this] {
            call_->ReachedResultPhases(/*all_sent=*/true);
            FinishWith(call_->NextResponseFrame(0, response_).status());
          });
          Unref();
        });
    if (cancel_.cancelled()) call_->CancelUcx();
  }

  // The end of a UCX phase: `next` when its transfers ended well, else the
  // call ends with why they did not.
  void AfterUcx(const absl::Status& s, const char* when, const std::function<void()>& next) {
    absl::Status idle;
    {
      absl::MutexLock l(&ucx_mu_);
      ucx_phase_ = false;
      idle = ucx_idle_error_;
    }
    Resume();
    if (!idle.ok()) return FinishWith(idle);
    if (cancel_.cancelled()) {
      return FinishWith(absl::CancelledError(absl::StrCat("the call was cancelled ", when, ".")));
    }
    if (!s.ok()) return FinishWith(s);
    next();
  }

  void FinishWith(const absl::Status& s) override {
    Settle(s, response_);
    AwaitClient(Wait::kRead);
    Finish(ToGrpcStatus(s));
  }

  grpc::ByteBuffer* response_;
  grpc_call* const grpc_call_;
  // A UCX phase is under way: its transfers are what the call waits for,
  // and cancelling the call or ending it as idle cancels them.
  absl::Mutex ucx_mu_;
  bool ucx_phase_ ABSL_GUARDED_BY(ucx_mu_) = false;
  absl::Status ucx_idle_error_ ABSL_GUARDED_BY(ucx_mu_);
  std::atomic<int> result_transfers_{0};  // a UCX call's results that went
};

class AgentService final
    : public v1::Agent::WithRawCallbackMethod_Execute<v1::Agent::WithRawCallbackMethod_Call<
          v1::Agent::WithCallbackMethod_Describe<v1::Agent::Service>>> {
 public:
  explicit AgentService(Shared& shared) : shared_(shared) {}

  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* Execute(
      grpc::CallbackServerContext* ctx) override {
    return new ExecuteReactor(shared_, ctx);
  }

  grpc::ServerUnaryReactor* Call(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                 grpc::ByteBuffer* response) override {
    return new CallReactor(shared_, ctx, request, response);
  }

  grpc::ServerUnaryReactor* Describe(grpc::CallbackServerContext* ctx, const v1::DescribeRequest*,
                                     v1::AgentInfo* info) override {
    const AgentState& s = shared_.state;
    grpc::ServerUnaryReactor* r = ctx->DefaultReactor();
    if (absl::Status a = DescribeAllowed(s, CredentialsOf(*ctx)); !a.ok()) {
      // A client's first contact with an agent: a bad or revoked token used
      // straight at an agent is refused here, and must be counted and
      // audited like a refused call (FarcallAuthFailures reads the count).
      Metrics().refused.With({"auth", kNoTenantLabel}).Increment();
      const std::string code = absl::StatusCodeToString(a.code());
      RefusalAudit::Get().Note({ctx->peer(), "", "auth", "(Describe)", code, a.message()});
      r->Finish(ToGrpcStatus(a));
      return r;
    }
    info->set_agent_id(s.agent_id());
    info->set_platform(std::string(PlatformName(s.config.platform)));
    info->set_version(Version());
    info->set_max_call_bytes(s.config.max_call_bytes);
    int64_t inflight = 0;
    for (const auto& d : s.backend.devices) inflight += d->active_calls.load();
    info->set_inflight_calls(inflight);
    info->set_calls_total(s.calls_ended.load(std::memory_order_relaxed));
    if (s.residents != nullptr) {
      info->set_resident_count(s.residents->count());
      info->set_resident_bytes(s.residents->bytes());
    }
    info->set_failed_calls_total(s.calls_failed.load(std::memory_order_relaxed));
    if (auto [failure, when] = s.LastFailure(); !failure.empty()) {
      info->set_last_failed_call(std::move(failure));
      info->set_last_failed_call_age_ms(absl::ToInt64Milliseconds(absl::Now() - when));
    }
    if (s.shm != nullptr) {
      info->set_shm_socket(s.shm->address());
      info->set_shm_regions(s.shm->region_count());
    }
    if (s.ucx != nullptr) info->set_ucx_address(UcxWorkerAddress(*s.ucx));
    for (const auto& d : s.backend.devices) {
      v1::DeviceInfo* di = info->add_devices();
      di->set_ordinal(d->ordinal());
      di->set_name(d->name());
      di->set_memory_bytes(d->memory_bytes());
    }
    for (const RegisteredHandler* h : s.registry.List(PlatformName(s.config.platform))) {
      v1::HandlerInfo* hi = info->add_handlers();
      hi->set_name(h->name);
      hi->set_command_buffer_compatible((h->traits & FARCALL_TRAIT_COMMAND_BUFFER_COMPATIBLE) != 0);
      hi->set_source(h->source);
    }
    r->Finish(grpc::Status::OK);
    return r;
  }

 private:
  Shared& shared_;
};

}  // namespace

std::unique_ptr<grpc::Service> NewAgentService(Shared& shared) {
  return std::make_unique<AgentService>(shared);
}

}  // namespace farcall::agent
