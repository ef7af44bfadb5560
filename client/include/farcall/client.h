// farcall C++ client: runs buffer callbacks on remote agents, directly or
// through a router. The same API serves both.
//
//   auto client = farcall::Client::Connect("localhost:50050");   // StatusOr
//   std::vector<float> x(8, 1.0f), y(8, 2.0f);
//   farcall::TensorSpec spec{farcall::DType::kF32, {8}};
//   farcall::CallRequest req;
//   req.handler = "axpy";
//   req.platform = "cpu";
//   req.args = {farcall::Arg::In(spec, x.data()), farcall::Arg::InOut(spec, y.data())};
//   req.results = {spec};
//   req.aliases = {{1, 0}};                    // y is updated in place
//   req.attributes["alpha"] = 3.0;
//   absl::StatusOr<farcall::CallResult> r = (*client)->Call(req);
//   // y now holds 3*x + y.
//
// A call whose tensors all fit in one message (CallOptions::chunk_bytes) goes
// as one unary Call RPC; larger ones stream in chunks over Execute. Errors
// are the wire contract's codes and messages, as absl::Status.
//
// Thread safety: a Client may be used from many threads at once. Memory
// passed in Args must stay valid, and InOut memory untouched, until the call
// completes (the sync form returns, or the async callback runs). Results
// aliased to InOut memory are written into it as they arrive, so after a
// failed call that memory may hold part of the result. Such a call is never
// sent again from it (core/retry_policy.h): it fails ABORTED naming the arg,
// unless CallOptions::keep_aliased_args kept a copy to restore it from (the
// memory is then as the caller gave it). CallOptions::retries says how often
// a call that may go again is sent again.
#ifndef FARCALL_CLIENT_INCLUDE_FARCALL_CLIENT_H_
#define FARCALL_CLIENT_INCLUDE_FARCALL_CLIENT_H_

#include <future>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "farcall/call_types.h"

namespace farcall {

class Client {
 public:
  // Connects lazily: this never fails for an unreachable target; calls do.
  // INVALID_ARGUMENT or NOT_FOUND for TLS files that cannot be used.
  static absl::StatusOr<std::unique_ptr<Client>> Connect(const std::string& target,
                                                         const ClientOptions& options = {});
  ~Client();

  // Blocks until the call completes.
  absl::StatusOr<CallResult> Call(const CallRequest& request, const CallOptions& options = {});
  // Returns at once; `done` runs once, on a gRPC thread. `request` may be
  // destroyed after CallAsync returns, but its Args' memory may not.
  void CallAsync(const CallRequest& request, const CallOptions& options, CallCallback done);
  std::future<absl::StatusOr<CallResult>> CallFuture(const CallRequest& request,
                                                     const CallOptions& options = {});

  // Resident arrays (farcall::Resident), for state that stays on an agent
  // between calls:
  //   Put     leaves ByteSize(spec) bytes at `data` on an agent of `platform`
  //           (through a router: one it picks) for `ttl` after its last use
  //           (zero: the agent's --resident_ttl);
  //   Get     copies one back: a snapshot, which Put restores on any agent;
  //           GetMany copies several of one agent in one call;
  //   Delete  frees them now.
  // All three are calls of the built-in `copy`, so a token needs it. Put
  // and Delete have side effects: a repeat with the same call_id runs once.
  absl::StatusOr<Resident> Put(const TensorSpec& spec, const void* data,
                               const std::string& platform = "cpu",
                               absl::Duration ttl = absl::ZeroDuration(),
                               const CallOptions& options = {});
  absl::StatusOr<ResultTensor> Get(const Resident& resident, const CallOptions& options = {});
  absl::StatusOr<std::vector<ResultTensor>> GetMany(const std::vector<Resident>& residents,
                                                    const CallOptions& options = {});
  absl::Status Delete(const std::vector<Resident>& residents, const CallOptions& options = {});

  // Shared memory for tensors, when the target is an agent on this host that
  // offers it; FAILED_PRECONDITION otherwise.
  absl::StatusOr<SharedBuffer> AllocateShared(size_t bytes);

  // Agent only.
  absl::StatusOr<AgentDescription> Describe(absl::Duration timeout = absl::Seconds(5));
  // Router only: every agent it knows, in its order. `refresh` probes each
  // one first instead of reporting the last periodic probe.
  absl::StatusOr<std::vector<AgentStatus>> ListAgents(bool refresh = false,
                                                      absl::Duration timeout = absl::Seconds(5));
  // The standard health check: OK when SERVING.
  absl::Status Health(absl::Duration timeout = absl::Seconds(5));
  // Stops this client's calls in flight, as CallStop::Stop does, and refuses
  // new ones: FAILED_PRECONDITION, "this client is closed." Closing twice
  // does nothing more. Destroying a client does not stop its asynchronous
  // calls (they keep what they need).
  void Close();
  // Waits `pause` before a caller sends a failed call again, or less: a
  // connection to the target that was not ready and comes up meanwhile ends
  // the wait at once. Meanwhile the calling thread does the connecting, so
  // a target that came back is reached even where nothing else drives gRPC
  // (a process whose calls are all blocking ones).
  void PauseBeforeRetry(absl::Duration pause);

 private:
  // The target's channel, the lookaside, and the closer (client.cc). Calls
  // in flight hold it, so a client may go before its calls end.
  struct State;
  explicit Client(std::shared_ptr<State> state);
  std::shared_ptr<State> state_;
};

}  // namespace farcall

#endif  // FARCALL_CLIENT_INCLUDE_FARCALL_CLIENT_H_
