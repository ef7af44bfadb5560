// Lookaside routing: a client given a router asks it which agents may serve
// a call (Router.Resolve) and calls one of them directly, so that the
// tensors never pass through the router. The router still decides which
// agents are live and allowed; this class only chooses among them.
//
//   auto la = std::make_shared<Lookaside>(router);  // the router's TargetChannel
//   absl::StatusOr<CallResult> r = la->Call(request, options);
//
// Answers are cached per (platform, handler) for as long as the router says
// (its probe interval) and dropped when an agent of theirs cannot be reached.
// Each agent is one TargetChannel, made on first use. A call goes through
// the router's own channel instead (as with CallOptions::via_router)
// when Resolve fails (the router then gives the call the answer it would
// have given it anyway), when no agent of the answer can be reached, or when
// an agent refuses this client's token.
//
// Thread safety: all methods may be called from any thread.
#ifndef FARCALL_CLIENT_LOOKASIDE_H_
#define FARCALL_CLIENT_LOOKASIDE_H_

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/target_channel.h"
#include "core/retry_policy.h"
#include "farcall/call_types.h"
#include "farcall/v1/farcall.grpc.pb.h"

namespace farcall::client_internal {

// Whether `address` is a plain HOST:PORT (a name or an IP literal, IPv6 in
// brackets, and a port): the only addresses taken from a router's answer,
// never a unix: socket or another resolver's target.
bool IsHostPort(absl::string_view address);

class Lookaside : public std::enable_shared_from_this<Lookaside> {
 public:
  // `router` reaches the router; the agents' channels take its options,
  // token and closer (Client::Close stops their calls too).
  explicit Lookaside(std::shared_ptr<TargetChannel> router);

  // One attempt of a call, as TargetChannel::Call's. `insist`: Insists()
  // of the call as its caller made it, before the client gave it an id.
  absl::StatusOr<CallResult> Call(const CallRequest& request, const CallOptions& options,
                                  bool insist);
  void CallAsync(const CallRequest& request, const CallOptions& options, bool insist,
                 CallCallback done);

  // Whether a call insists on the one agent that would hold its ledger
  // entry: a call with side effects whose call_id the caller chose (so it
  // may repeat an earlier call, which that agent may have run). It is never
  // sent to another agent, which would run it again; when that agent
  // cannot be reached it fails UNAVAILABLE (LedgerAgentUnreachable). A call
  // whose id the client made for it may go to the next agent.
  static bool Insists(const CallRequest& request, const CallOptions& caller_options);

  // Agents that failed this client stay out of its choice for a while.
  static constexpr absl::Duration kFirstBackoff = absl::Seconds(1);
  static constexpr absl::Duration kMaxBackoff = absl::Seconds(30);
  // An agent that refused this client's token (the router may use its own).
  static constexpr absl::Duration kRefusedFor = absl::Minutes(1);
  // How long a router's last answer is used while the router is away.
  static constexpr absl::Duration kStaleFor = absl::Seconds(30);
  // How long the first contact with an agent may take before the call goes
  // elsewhere: an address this client cannot route to would otherwise hold
  // each call until its deadline.
  static constexpr absl::Duration kConnectTimeout = absl::Seconds(2);

 private:
  struct Agent;
  struct Answer;
  class Attempts;

  static absl::Status LedgerAgentUnreachable(const Agent& agent, const CallOptions& options);
  // The agents to try for this call, best first; empty: through the router.
  // `insist`: agents that failed lately are tried too.
  std::vector<std::shared_ptr<Agent>> Choose(const CallRequest& request, const CallOptions& options,
                                             absl::Time deadline, bool insist);
  // Whether an agent the router named may be called directly (see
  // IsHostPort, IsLoopbackTarget and TokenMayGo).
  bool Usable(const v1::ResolvedAgent& a) const;
  // The router's answer for `key`, asked afresh when it has expired.
  std::shared_ptr<const Answer> Resolved(const CallRequest& request, absl::Time deadline);
  // The agent's channel, connected and checked on first use; null when it
  // cannot be reached now (it is then avoided for a while), and once the
  // client is closed (the call then goes to the router's channel, which
  // ends it).
  std::shared_ptr<TargetChannel> Ready(Agent& agent, absl::Time deadline, bool insist = false);
  // What to do after an attempt on `agent` (NextStep: kDone, kNextAgent or
  // kViaRouter); clears the not-delivered mark.
  RetryStep Judge(Agent& agent, const CallRequest& request, bool insist,
                  absl::StatusOr<CallResult>& result);
  // Leaves `agent` out of this client's choice for a while.
  void Avoid(Agent& agent, absl::Duration at_least);
  // A call's options through the router.
  CallOptions ProxyOptions(const CallOptions& options, absl::Time deadline) const;

  // The router's channel: for Resolve, and for calls through the router.
  const std::shared_ptr<TargetChannel> router_channel_;
  const std::string router_target_;
  const ClientOptions options_;
  const std::string authorization_;
  std::unique_ptr<v1::Router::Stub> router_;
  absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<Agent>> agents_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::shared_ptr<const Answer>> answers_ ABSL_GUARDED_BY(mu_);
  // A router that has no Resolve (an older version): every call through it.
  std::atomic<bool> resolve_missing_{false};
  // Says on stderr, once, why an agent could not be called directly, when
  // the likely cause is TLS without agent_tls_server_name.
  void SayOnceWhyNotDirect(const std::string& address);
  std::atomic<bool> said_why_not_direct_{false};
};

}  // namespace farcall::client_internal

#endif  // FARCALL_CLIENT_LOOKASIDE_H_
