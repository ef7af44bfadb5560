// One target, an agent or a router, as the client reaches it: its gRPC
// channel and credentials, whether it is an agent or a router, the agent's
// shared-memory channel and UCX address, the plan of each call (which RPC,
// how its tensors travel), and the fall back from UCX to gRPC. The middle
// layer of the client: Client (client.cc) holds one for its own target, and
// the lookaside one for each agent a router names; each sends its calls
// through rpc_calls.h. Internal to client/.
//
// Thread safety: all methods may be called from any thread.
#ifndef FARCALL_CLIENT_TARGET_CHANNEL_H_
#define FARCALL_CLIENT_TARGET_CHANNEL_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/call_codec.h"
#include "client/rpc_calls.h"
#include "client/shm_channel.h"
#include "core/retry_policy.h"
#include "farcall/call_types.h"
#include "farcall/v1/farcall.grpc.pb.h"
#include "grpcpp/channel.h"

namespace farcall::client_internal {

// Whether `target` is a loopback address (this host).
bool IsLoopbackTarget(absl::string_view target);
// Whether `options` may send its token to `target`: over TLS, to this host,
// or where allow_insecure_tokens says so.
bool TokenMayGo(absl::string_view target, const ClientOptions& options);
// Whether `options` ask for TLS (a CA, or a client certificate).
bool UsesTls(const ClientOptions& options);

// A call's outcome as its caller gets it. CANCELLED means the caller
// stopped the call (`stopped`: CallOptions::stop, Client::Close): a server
// that ended the call by going away (its drain ran out, it crashed) is
// UNAVAILABLE.
absl::StatusOr<CallResult> AsCallerSees(absl::StatusOr<CallResult> r, bool stopped);

class TargetChannel : public std::enable_shared_from_this<TargetChannel> {
 public:
  // Whether the target is an agent or a router: the method paths differ.
  enum class Service { kUnknown, kAgent, kRouter };

  // Connects lazily. `closer` stops its calls when stopped (Client::Close):
  // the client's, shared with every channel of its lookaside.
  // INVALID_ARGUMENT or NOT_FOUND for TLS files that cannot be used, and for
  // a token that would travel in clear (TokenMayGo).
  static absl::StatusOr<std::shared_ptr<TargetChannel>> Open(
      const std::string& target, const ClientOptions& options,
      std::shared_ptr<const CallStop> closer);

  // One attempt of a call, as its caller sees it (AsCallerSees). `options`
  // carry the call's id. A call that went over UCX by itself and could not
  // deliver its args goes again over gRPC, within its timeout, and UCX rests
  // for a while.
  absl::StatusOr<CallResult> Call(const CallRequest& request, const CallOptions& options);
  // The same, returning at once; `done` runs once, on a gRPC thread.
  void CallAsync(const CallRequest& request, const CallOptions& options, CallCallback done);

  // Learns once whether the target is an agent (Describe answers) or a
  // router (Describe is unimplemented there), asked with the credentials of
  // a call of `handler` (a lookaside agent's channel holds capabilities
  // alone).
  absl::StatusOr<Service> GetService(absl::Duration timeout, bool wait_for_ready = false,
                                     const std::string& handler = "");
  // Whether the target answered as a router (false before it answered).
  bool IsRouter();
  // Whether it answered as an agent.
  bool IsAgent();

  // Memory in the agent's shared-memory channel; FAILED_PRECONDITION when
  // the target is not an agent on this host that offers one.
  absl::StatusOr<std::shared_ptr<ShmRegion>> AllocateShared(size_t bytes);

  // This channel is the lookaside's, for one agent a router named: a
  // failure that never reached the agent is marked (MarkNotDelivered).
  void MarkDirect();
  // Its calls present the capability `source` gives for their handler
  // instead of the token (none when it gives ""). Before any call.
  void SetCapabilitySource(std::function<std::string(const std::string& handler)> source);
  // Whether the target is connected now, waiting for that up to `wait`
  // (zero: only asks, and starts connecting when idle).
  bool Connected(absl::Duration wait);
  // Client::PauseBeforeRetry.
  void PauseBeforeRetry(absl::Duration pause);

  // For RPCs other than calls (Describe, ListAgents, Health): the channel,
  // its stubs, and the token on a context.
  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }
  v1::Agent::Stub& agent_stub() { return *agent_; }
  v1::Router::Stub& router_stub() { return *router_; }
  void AddToken(grpc::ClientContext& ctx) const;

  const std::string& target() const { return target_; }
  const ClientOptions& options() const { return options_; }
  const std::string& authorization() const { return authorization_; }
  const std::shared_ptr<const CallStop>& closer() const { return closer_; }

 private:
  struct Plan;
  TargetChannel() = default;
  absl::StatusOr<Plan> MakePlan(const CallRequest& request, const CallOptions& options);
  // CallAsync's work, the caller's view aside.
  void Start(const CallRequest& request, const CallOptions& options, CallCallback done);
  RpcTarget RpcTargetFor(const Plan& plan) const;
  CallCredentials CredentialsFor(const std::string& handler) const;
  bool Stopped(const CallOptions& options) const;
  // The agent's shared-memory channel, connected on first use; null when the
  // target is not a local agent offering one (then calls use gRPC alone).
  std::shared_ptr<ShmChannel> SharedMemory();
  // The channel failed (the agent refused this client's memory, or the
  // socket broke): calls go over gRPC, and the channel is tried again later,
  // a little later each time it fails.
  void DisableSharedMemory();
  void ShmBackOffLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether a call goes over UCX: when asked (kUcx, or an error if it
  // cannot), or by itself (kAuto, no RPC shape asked) for calls of at least
  // ucx_min_bytes whose agent offers UCX.
  absl::StatusOr<UcxRoute> ChooseUcx(const PreparedCall& call, const CallOptions& o);
  // UCX failed before a call ran (an agent whose worker cannot be reached
  // from here, say): calls go over gRPC for a while, longer each time.
  void BackOffUcx();

  std::shared_ptr<grpc::Channel> channel_;
  std::shared_ptr<const CallStop> closer_;
  std::string target_;
  ClientOptions options_;
  std::string authorization_;  // "Bearer TOKEN", or empty
  bool direct_ = false;        // MarkDirect
  // For a lookaside agent's channel: the capability for a handler, or empty
  // (then the token goes). Set before the channel is shared.
  std::function<std::string(const std::string& handler)> capability_source_;
  std::unique_ptr<grpc::GenericStub> generic_;
  std::unique_ptr<v1::Agent::Stub> agent_;
  std::unique_ptr<v1::Router::Stub> router_;

  absl::Mutex mu_;
  Service service_ ABSL_GUARDED_BY(mu_) = Service::kUnknown;
  std::string shm_socket_ ABSL_GUARDED_BY(mu_);  // what the agent offers
  bool shm_tried_ ABSL_GUARDED_BY(mu_) = false;
  std::shared_ptr<ShmChannel> shm_ ABSL_GUARDED_BY(mu_);
  // After a failed channel, when to try again, and the wait after that.
  absl::Time shm_retry_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  Backoff shm_backoff_ ABSL_GUARDED_BY(mu_){absl::Seconds(1), absl::Minutes(1)};
  // The agent's UCX worker address (empty: it offers none), and when to
  // use it again after UCX failed this client.
  std::string ucx_address_ ABSL_GUARDED_BY(mu_);
  absl::Time ucx_retry_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  Backoff ucx_backoff_ ABSL_GUARDED_BY(mu_){absl::Seconds(1), absl::Minutes(5)};
};

}  // namespace farcall::client_internal

#endif  // FARCALL_CLIENT_TARGET_CHANNEL_H_
