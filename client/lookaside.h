// Lookaside routing: a client given a router asks it which agents may serve
// a call (Router.Resolve) and calls one of them directly, so that the
// tensors never pass through the router. The router still decides which
// agents are live and allowed; this class only chooses among them.
//
//   auto la = std::make_shared<Lookaside>(router_target, client_options, channel);
//   absl::StatusOr<CallResult> r = la->Call(request, options);
//
// Answers are cached per (platform, handler) for as long as the router says
// (its probe interval) and dropped when an agent of theirs cannot be reached.
// A call goes through the router instead (as with CallOptions::via_router)
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
#include "farcall/client.h"
#include "farcall/v1/farcall.grpc.pb.h"
#include "grpcpp/channel.h"

namespace farcall::client_internal {

// A direct call's failure that never reached its agent (NeverReachedAgent):
// the call may go elsewhere. A payload on the status, set only on the
// lookaside's own agent clients and removed before callers see it.
void MarkNotDelivered(absl::Status& s);
bool NotDelivered(const absl::Status& s);

// Whether `target` is a loopback address (this host).
bool IsLoopbackTarget(absl::string_view target);
// Whether `address` is a plain HOST:PORT (a name or an IP literal, IPv6 in
// brackets, and a port): the only addresses taken from a router's answer,
// never a unix: socket or another resolver's target.
bool IsHostPort(absl::string_view address);
// Whether `options` may send its token to `target`: over TLS, to this host,
// or where allow_insecure_tokens says so.
bool TokenMayGo(absl::string_view target, const ClientOptions& options);

class Lookaside : public std::enable_shared_from_this<Lookaside> {
 public:
  // `channel` reaches the router; `authorization` is what calls carry.
  Lookaside(std::string router_target, ClientOptions options,
            std::shared_ptr<grpc::Channel> channel, std::string authorization);

  absl::StatusOr<CallResult> Call(const CallRequest& request, const CallOptions& options);
  void CallAsync(const CallRequest& request, const CallOptions& options, CallCallback done);
  // Closes the agents' clients and the router's (Client::Close): their calls
  // in flight stop, and later ones are refused.
  void Close();

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
  class AsyncCall;
  enum class Next { kDone, kNextAgent, kViaRouter };

  // Whether a call insists on the one agent that would hold its ledger
  // entry: a call with side effects whose call_id the caller chose (so it
  // may repeat an earlier call, which that agent may have run). It is never
  // sent to another agent, which would run it again; when that agent
  // cannot be reached it fails UNAVAILABLE (LedgerAgentUnreachable). A call
  // whose id the client made for it may go to the next agent.
  static bool Insists(const CallRequest& request, const CallOptions& caller_options);
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
  // The agent's client, connected and checked on first use; null when it
  // cannot be reached now (it is then avoided for a while).
  std::shared_ptr<Client> Ready(Agent& agent, absl::Time deadline, bool insist = false);
  // What to do after an attempt on `agent`; clears the not-delivered mark.
  Next Judge(Agent& agent, const CallRequest& request, absl::StatusOr<CallResult>& result);
  // Leaves `agent` out of this client's choice for a while.
  void Avoid(Agent& agent, absl::Duration at_least);
  // The client for calls through the router, made on first use.
  Client& Proxy();
  CallOptions ProxyOptions(const CallOptions& options, absl::Time deadline) const;

  const std::string router_target_;
  const ClientOptions options_;
  const std::string authorization_;
  std::unique_ptr<v1::Router::Stub> router_;
  absl::Mutex mu_;
  std::unique_ptr<Client> proxy_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::shared_ptr<Agent>> agents_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::shared_ptr<const Answer>> answers_ ABSL_GUARDED_BY(mu_);
  // A router that has no Resolve (an older version): every call through it.
  std::atomic<bool> resolve_missing_{false};
  std::atomic<bool> closed_{false};
};

}  // namespace farcall::client_internal

#endif  // FARCALL_CLIENT_LOOKASIDE_H_
