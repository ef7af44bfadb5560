#include "client/lookaside.h"

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client/call_codec.h"
#include "client/run_after.h"
#include "core/error_reason.h"
#include "core/rendezvous.h"
#include "core/tokens.h"
#include "core/wire/grpc_status.h"

namespace farcall::client_internal {
namespace {

std::string AnswerKey(const CallRequest& request) {
  return absl::StrCat(request.platform, "\n", request.handler);
}

// Whether a failed Resolve never got the router's own answer: a transport
// failure or a deadline, not a refusal such as NoLiveAgentError (which is
// UNAVAILABLE too, marked with its reason).
bool RouterUnreachable(const grpc::Status& s) {
  if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) return true;
  const ErrorReason reason = ReasonOf(FromGrpcStatus(s));
  return s.error_code() == grpc::StatusCode::UNAVAILABLE && reason != ErrorReason::kNoLiveAgent &&
         reason != ErrorReason::kRouterDraining;
}

}  // namespace

bool IsHostPort(absl::string_view address) {
  absl::string_view host, port;
  if (absl::StartsWith(address, "[")) {
    const size_t close = address.find("]:");
    if (close == absl::string_view::npos) return false;
    host = address.substr(1, close - 1);
    port = address.substr(close + 2);
    if (host.empty() || host.find_first_not_of("0123456789abcdefABCDEF:.") != host.npos) {
      return false;
    }
  } else {
    const size_t colon = address.rfind(':');
    if (colon == absl::string_view::npos) return false;
    host = address.substr(0, colon);
    port = address.substr(colon + 1);
    // A name or an IPv4 literal: no scheme ("unix:", "dns:"), no path.
    if (host.empty() ||
        host.find_first_not_of("abcdefghijklmnopqrstuvwxyz"
                               "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_") != host.npos) {
      return false;
    }
  }
  int p = 0;
  if (port.empty() || port.size() > 5 || !absl::SimpleAtoi(port, &p)) return false;
  return p > 0 && p < 65536 && port.find_first_not_of("0123456789") == port.npos;
}

// One agent that some answer named. Its channel is made on first use and
// kept, so that its connection (and shared memory, on this host) is reused.
struct Lookaside::Agent : std::enable_shared_from_this<Agent> {
  explicit Agent(std::string a) : address(std::move(a)) {}
  const std::string address;
  std::atomic<int64_t> inflight{0};  // this client's calls there now
  absl::Mutex mu;
  std::shared_ptr<TargetChannel> channel ABSL_GUARDED_BY(mu);
  bool reached ABSL_GUARDED_BY(mu) = false;     // connected since it last failed
  bool contacted ABSL_GUARDED_BY(mu) = false;   // its first contact was tried
  bool connecting ABSL_GUARDED_BY(mu) = false;  // that first contact waits now
  absl::Time avoid_until ABSL_GUARDED_BY(mu) = absl::InfinitePast();
  Backoff backoff ABSL_GUARDED_BY(mu){kFirstBackoff, kMaxBackoff};
  // The router's capability for this client here, by handler (the last
  // answer's; absent when the router mints none).
  std::map<std::string, std::string> capabilities ABSL_GUARDED_BY(mu);
  std::string agent_id ABSL_GUARDED_BY(mu);  // as the last answer named it
};

// A Resolve answer: the agents in the router's order, with the calls it
// routed to each.
struct Lookaside::Answer {
  std::vector<std::shared_ptr<Agent>> agents;
  std::vector<int64_t> router_inflight;
  absl::Time expires;
  absl::Time resolved;  // when the router gave it
};

Lookaside::Lookaside(std::shared_ptr<TargetChannel> router)
    : router_channel_(std::move(router)),
      router_target_(router_channel_->target()),
      options_(router_channel_->options()),
      authorization_(router_channel_->authorization()),
      router_(v1::Router::NewStub(router_channel_->channel())) {}

bool Lookaside::Usable(const v1::ResolvedAgent& a) const {
  if (!IsHostPort(a.address())) return false;
  // An agent's loopback address names the router's host: only a router on
  // this host may name one (else whatever listens here would get the call).
  if (IsLoopbackTarget(a.address()) && !IsLoopbackTarget(router_target_)) return false;
  // A capability is a bearer credential for its lifetime, as a token is:
  // either goes only where Connect would send a token (over TLS, or to
  // this host).
  return (a.capability().empty() && options_.token.empty()) || TokenMayGo(a.address(), options_);
}

std::shared_ptr<const Lookaside::Answer> Lookaside::Resolved(const CallRequest& request,
                                                             absl::Time deadline) {
  const std::string key = AnswerKey(request);
  const absl::Time now = absl::Now();
  std::shared_ptr<const Answer> last;
  {
    absl::MutexLock l(&mu_);
    auto it = answers_.find(key);
    if (it != answers_.end()) {
      if (now < it->second->expires) return it->second;
      last = it->second;
    }
  }
  // Several threads may ask at once when an answer expires; each answer is
  // as good as the others, and the last one stays.
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(std::min(deadline, now + kConnectTimeout)));
  if (!authorization_.empty()) ctx.AddMetadata(kAuthorizationKey, authorization_);
  v1::ResolveRequest req;
  req.set_platform(request.platform);
  req.set_handler(request.handler);
  v1::ResolveResponse resp;
  grpc::Status s = router_->Resolve(&ctx, req, &resp);
  if (!s.ok()) {
    // UNIMPLEMENTED is a router without Resolve (gRPC's own answer): a
    // Resolve names one platform, so the contract's UNIMPLEMENTED for more
    // than one cannot come, and an unsupported platform is INVALID_ARGUMENT.
    if (s.error_code() == grpc::StatusCode::UNIMPLEMENTED) resolve_missing_ = true;
    absl::MutexLock l(&mu_);
    if (last != nullptr && RouterUnreachable(s) && now - last->resolved < kStaleFor) {
      // The router is away (a restart, a network split): its last answer
      // still names agents, which may well be up; those that are not fail
      // their first contact and the call goes to the router after all. Ask
      // it again in a second; past kStaleFor the answer is dropped.
      auto kept = std::make_shared<Answer>(*last);
      kept->expires = now + kFirstBackoff;
      answers_[key] = kept;
      return kept;
    }
    answers_.erase(key);
    return nullptr;
  }
  auto answer = std::make_shared<Answer>();
  const absl::Duration valid =
      std::clamp(absl::Milliseconds(resp.valid_for_ms()), absl::Milliseconds(50), absl::Minutes(1));
  answer->resolved = absl::Now();
  answer->expires = answer->resolved + valid;
  absl::MutexLock l(&mu_);
  for (const v1::ResolvedAgent& a : resp.agents()) {
    if (!Usable(a)) continue;
    std::shared_ptr<Agent>& agent = agents_[a.address()];
    if (agent == nullptr) agent = std::make_shared<Agent>(a.address());
    {
      absl::MutexLock al(&agent->mu);
      agent->agent_id = a.agent_id();
      if (a.capability().empty()) {
        agent->capabilities.erase(request.handler);
      } else {
        agent->capabilities[request.handler] = a.capability();
      }
    }
    answer->agents.push_back(agent);
    answer->router_inflight.push_back(a.inflight_calls());
  }
  answers_[key] = answer;
  // Agents no answer names any more, and no call uses, are forgotten (pods
  // come and go); their connections stay in the process's channel table.
  for (auto it = agents_.begin(); it != agents_.end();) {
    it = it->second.use_count() == 1 ? agents_.erase(it) : std::next(it);
  }
  return answer;
}

std::vector<std::shared_ptr<Lookaside::Agent>> Lookaside::Choose(const CallRequest& request,
                                                                 const CallOptions& options,
                                                                 absl::Time deadline, bool insist) {
  // Calls sent unchecked, or naming several platforms, are for observing
  // the router's own answers.
  if (resolve_missing_ || options.via_router || !options.validate_locally ||
      !request.platforms.empty()) {
    return {};
  }
  // A call that names resident arrays goes to their holder, the agent their
  // handles name: straight there when the answer names it, else through the
  // router (which reaches a draining holder too, or answers that it is
  // lost). A call that only keeps results goes anywhere.
  std::string holder;
  if (NamesResidents(request)) {
    absl::StatusOr<std::string> h = ResidentHolderOf(request);
    if (!h.ok()) return {};  // the router gives the verdict
    holder = *std::move(h);
  }
  std::shared_ptr<const Answer> answer = Resolved(request, deadline);
  if (answer == nullptr) return {};
  const absl::Time now = absl::Now();
  struct Candidate {
    std::shared_ptr<Agent> agent;
    int64_t load;
    uint64_t score;
  };
  const bool keyed = request.has_side_effect && !options.call_id.empty();
  std::vector<Candidate> c;
  for (size_t i = 0; i < answer->agents.size(); ++i) {
    const std::shared_ptr<Agent>& a = answer->agents[i];
    const uint64_t score = keyed ? RendezvousScore(options.call_id, a->address) : 0;
    absl::MutexLock l(&a->mu);
    if (!holder.empty() && a->agent_id != holder) continue;
    // The agent a repeat must meet is tried even when it failed lately.
    if (now < a->avoid_until && !insist) continue;
    c.push_back({a, answer->router_inflight[i] + a->inflight.load(), score});
  }
  if (keyed) {
    // The agent a router would pick for this call_id, so that repeats of
    // one call meet the agent that remembers it, whichever way they go.
    std::sort(c.begin(), c.end(),
              [](const Candidate& x, const Candidate& y) { return x.score > y.score; });
  } else if (c.size() > 1) {
    // Power of two choices on load first, then the rest by load.
    thread_local absl::BitGen gen;
    size_t x = absl::Uniform<size_t>(gen, 0, c.size());
    size_t y = absl::Uniform<size_t>(gen, 0, c.size() - 1);
    if (y >= x) ++y;
    std::swap(c[0], c[c[y].load < c[x].load ? y : x]);
    std::stable_sort(c.begin() + 1, c.end(),
                     [](const Candidate& p, const Candidate& q) { return p.load < q.load; });
  }
  std::vector<std::shared_ptr<Agent>> out;
  for (Candidate& k : c) out.push_back(std::move(k.agent));
  return out;
}

std::shared_ptr<TargetChannel> Lookaside::Ready(Agent& agent, absl::Time deadline, bool insist) {
  std::shared_ptr<TargetChannel> channel;
  absl::Duration wait = absl::ZeroDuration();
  if (router_channel_->closer()->stopped()) return nullptr;
  {
    absl::MutexLock l(&agent.mu);
    if (absl::Now() < agent.avoid_until && !insist) return nullptr;
    if (agent.channel == nullptr) {
      ClientOptions direct = options_;
      direct.tls_server_name = options_.agent_tls_server_name;
      // An agent the router mints capabilities for never gets the token.
      if (!agent.capabilities.empty()) direct.token.clear();
      absl::StatusOr<std::shared_ptr<TargetChannel>> c =
          TargetChannel::Open(agent.address, direct, router_channel_->closer());
      if (!c.ok()) return nullptr;  // TLS files the router's target took: not here
      (*c)->MarkDirect();
      // Calls present the router's capability for their handler here, not
      // this client's token.
      (*c)->SetCapabilitySource([weak = agent.weak_from_this()](const std::string& handler) {
        std::shared_ptr<Agent> a = weak.lock();
        if (a == nullptr) return std::string();
        absl::MutexLock al(&a->mu);
        auto it = a->capabilities.find(handler);
        return it == a->capabilities.end() ? std::string() : it->second;
      });
      agent.channel = *std::move(c);
    }
    if (agent.reached) return agent.channel;
    if (agent.connecting && !insist) return nullptr;  // another call's first contact
    channel = agent.channel;
    // The first contact waits a little for a connection, so that an address
    // this client cannot route to costs that once, not each call's whole
    // deadline. Later (after a failure) nothing waits: gRPC reconnects in
    // the background, and the agent is used again once it is connected.
    if (!agent.contacted || insist) {
      agent.contacted = true;
      agent.connecting = true;
      wait = std::max(std::min(deadline - absl::Now(), kConnectTimeout), absl::ZeroDuration());
    }
  }
  // Outside the lock: other calls skip this agent meanwhile.
  const bool connected = channel->Connected(wait);
  absl::MutexLock l(&agent.mu);
  agent.connecting = false;
  if (connected) {
    agent.reached = true;
    return channel;
  }
  agent.avoid_until = absl::Now() + agent.backoff.Next();
  SayOnceWhyNotDirect(agent.address);
  return nullptr;
}

void Lookaside::SayOnceWhyNotDirect(const std::string& address) {
  // Over TLS without agent_tls_server_name each agent's certificate is
  // checked against its address, which a certificate shared by many agents
  // (a Kubernetes Service's name) does not hold: every call then goes
  // through the router, and nothing else would say why. A library has no
  // log of its own: one line on stderr, once per client.
  if (!UsesTls(options_) || !options_.agent_tls_server_name.empty() ||
      said_why_not_direct_.exchange(true)) {
    return;
  }
  std::fprintf(stderr,
               "farcall: the agent at %s could not be reached directly over TLS, so calls go "
               "through the router; if the agents' certificate names a Service, not each "
               "agent's address, give the client that name (ClientOptions::agent_tls_server_name, "
               "--agent_tls_server_name, or agent_tls_server_name= in Python). Said once per "
               "client.\n",
               address.c_str());
}

void Lookaside::Avoid(Agent& agent, absl::Duration at_least) {
  absl::MutexLock l(&agent.mu);
  agent.avoid_until = absl::Now() + std::max(agent.backoff.Next(), at_least);
  agent.reached = false;
}

RetryStep Lookaside::Judge(Agent& agent, const CallRequest& request, bool insist,
                           absl::StatusOr<CallResult>& result) {
  if (result.ok()) {
    absl::MutexLock l(&agent.mu);
    agent.backoff.Reset();
    return RetryStep::kDone;
  }
  absl::Status s = result.status();
  const bool not_delivered = NotDelivered(s);
  if (not_delivered) {
    ClearNotDelivered(s);
    result = s;
  }
  const RetryStep step =
      NextStep({s, request.has_side_effect, Hop::kLookasideAgent, not_delivered});
  if (step == RetryStep::kViaRouter) {
    Avoid(agent, kRefusedFor);
    // Its capability may be what was refused (a key rotated out): the next
    // answer brings fresh ones.
    absl::MutexLock l(&mu_);
    answers_.erase(AnswerKey(request));
    return step;
  }
  // An agent that could not be reached, or went away mid-call, stays out of
  // the choice for a while (its answer is asked afresh), whatever follows.
  if (!absl::IsCancelled(s) &&
      (not_delivered || (absl::IsUnavailable(s) && ReasonOf(s) != ErrorReason::kHandlerError))) {
    Avoid(agent, kFirstBackoff);
    absl::MutexLock l(&mu_);
    answers_.erase(AnswerKey(request));
  }
  // A call whose caller named its id may have run on this agent in an
  // earlier call of the caller's: it never goes to another one.
  if (insist && request.has_side_effect) return RetryStep::kDone;
  return step == RetryStep::kNextAgent ? step : RetryStep::kDone;
}

bool Lookaside::Insists(const CallRequest& request, const CallOptions& caller_options) {
  return request.has_side_effect && !caller_options.call_id.empty();
}

absl::Status Lookaside::LedgerAgentUnreachable(const Agent& agent, const CallOptions& options) {
  absl::Status s = absl::UnavailableError(absl::StrCat(
      "cannot reach ", agent.address, ", the agent that would hold call ",
      options.call_id.substr(0, 64),
      " (a call with side effects goes only where a repeat of it would): try again later."));
  return s;
}

CallOptions Lookaside::ProxyOptions(const CallOptions& options, absl::Time deadline) const {
  CallOptions o = options;
  o.via_router = true;
  o.timeout = std::max(deadline - absl::Now(), absl::ZeroDuration());
  return o;
}

// One call's attempts on the agents the router named, then through the
// router: the lookaside's one state machine. Lookaside::Call drives it on
// the caller's thread (Run: each attempt a blocking call, as the caller's
// busy_poll wants); CallAsync asynchronously (Start), with its own copy of
// the request (the caller's may be gone). What follows an attempt is Judge's
// (core/retry_policy.h's NextStep).
class Lookaside::Attempts : public std::enable_shared_from_this<Attempts> {
 public:
  Attempts(std::shared_ptr<Lookaside> owner, const CallRequest* request, const CallOptions& options,
           bool insist)
      : owner_(std::move(owner)),
        request_(request),
        insist_(insist),
        options_(WithCallId(options)),
        deadline_(absl::Now() + options.timeout) {}
  // CallAsync's: the request is kept here.
  void Own(const CallRequest& request, CallCallback done) {
    owned_ = request;
    request_ = &owned_;
    done_ = std::move(done);
  }

  absl::StatusOr<CallResult> Run() {
    agents_ = owner_->Choose(*request_, options_, deadline_, insist_);
    for (;;) {
      std::shared_ptr<Agent> agent;
      std::shared_ptr<TargetChannel> channel;
      absl::Status refused;
      if (!NextAgent(agent, channel, refused)) {
        if (!refused.ok()) return refused;
        return owner_->router_channel_->Call(*request_, ProxyOptions());
      }
      ++agent->inflight;
      absl::StatusOr<CallResult> r = channel->Call(*request_, AttemptOptions());
      --agent->inflight;
      if (Done(*agent, r)) return r;
    }
  }

  void Start() {
    agents_ = owner_->Choose(*request_, options_, deadline_, insist_);
    TryNext();
  }

 private:
  // The next agent that can be reached now (its first contact may wait, at
  // most kConnectTimeout); false when none is left, and then `refused` says
  // why a call that insists on its agent ends (else it goes to the router).
  bool NextAgent(std::shared_ptr<Agent>& agent, std::shared_ptr<TargetChannel>& channel,
                 absl::Status& refused) {
    while (next_ < agents_.size()) {
      agent = agents_[next_++];
      channel = owner_->Ready(*agent, deadline_, insist_);
      if (channel != nullptr) return true;
      if (insist_) {
        refused = LedgerAgentUnreachable(*agent, options_);
        return false;
      }
    }
    return false;
  }
  CallOptions AttemptOptions() const {
    CallOptions o = options_;
    o.timeout = deadline_ - absl::Now();
    return o;
  }
  CallOptions ProxyOptions() const { return owner_->ProxyOptions(options_, deadline_); }
  // Whether the attempt on `agent` that ended with `r` ends the call.
  bool Done(Agent& agent, absl::StatusOr<CallResult>& r) {
    const RetryStep next = owner_->Judge(agent, *request_, insist_, r);
    if (next == RetryStep::kViaRouter) next_ = agents_.size();
    return next == RetryStep::kDone;
  }

  // May run on a RunAfter thread (after a failed attempt).
  void TryNext() {
    std::shared_ptr<Agent> agent;
    std::shared_ptr<TargetChannel> channel;
    absl::Status refused;
    if (!NextAgent(agent, channel, refused)) {
      if (!refused.ok()) return done_(refused);
      return owner_->router_channel_->CallAsync(*request_, ProxyOptions(), std::move(done_));
    }
    ++agent->inflight;
    channel->CallAsync(*request_, AttemptOptions(),
                       [self = shared_from_this(), agent](absl::StatusOr<CallResult> r) {
                         --agent->inflight;
                         if (self->Done(*agent, r)) return self->done_(std::move(r));
                         // Not here, on the gRPC thread that ended the attempt: the
                         // next one may wait for gRPC (an agent's connection, a new
                         // channel's Describe, the router), which that thread may be
                         // needed for (client/run_after.h).
                         client_internal::RunAfter(absl::ZeroDuration(),
                                                   [self] { self->TryNext(); });
                       });
  }

  const std::shared_ptr<Lookaside> owner_;
  const CallRequest* request_;
  CallRequest owned_;
  const bool insist_;
  const CallOptions options_;
  const absl::Time deadline_;
  CallCallback done_;
  std::vector<std::shared_ptr<Agent>> agents_;
  size_t next_ = 0;
};

absl::StatusOr<CallResult> Lookaside::Call(const CallRequest& request,
                                           const CallOptions& caller_options, bool insist) {
  Attempts attempts(shared_from_this(), &request, caller_options, insist);
  return attempts.Run();
}

void Lookaside::CallAsync(const CallRequest& request, const CallOptions& options, bool insist,
                          CallCallback done) {
  auto attempts = std::make_shared<Attempts>(shared_from_this(), nullptr, options, insist);
  attempts->Own(request, std::move(done));
  attempts->Start();
}

}  // namespace farcall::client_internal
