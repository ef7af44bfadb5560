// The agent's reactors (agent_service.cc) and what they share with the
// server that starts them (agent_server.cc): the state, the drain gate, the
// worker pool and the idle watchdog. Internal to the agent.
#ifndef FARCALL_DEVICE_AGENTS_AGENT_REACTORS_H_
#define FARCALL_DEVICE_AGENTS_AGENT_REACTORS_H_

#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "core/drain_gate.h"
#include "core/live_calls.h"
#include "core/ref_counted.h"
#include "device_agents/agent_call.h"
#include "device_agents/agent_service.h"
#include "device_agents/agent_state.h"
#include "device_agents/idle_watchdog.h"
#include "device_agents/worker_pool.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/service_type.h"

namespace farcall::agent {

// A call in flight, which a drain that runs out ends itself (CutByDrain):
// its caller then gets the status contract's answer, reason DRAIN_CUT,
// rather than gRPC's own cancellation.
class LiveCall : public WatchedCall, public LiveCalls::Call {
 public:
  void Hold() override { Ref(); }
  void Release() override { Unref(); }
};

struct Shared {
  AgentState state;
  DrainGate gate;  // closed at shutdown
  std::unique_ptr<WorkerPool> pool;
  IdleWatchdog* watchdog = nullptr;  // null: streams never time out
  // The calls in flight (from their start to OnDone), for a drain that
  // runs out.
  LiveCalls live;
  // Where a call's handler runs: its own threads (in-process handlers), or
  // the shared workers.
  WorkerPool& PoolFor(const AgentCall& call) {
    WorkerPool* own = call.handler_pool();
    return own != nullptr ? *own : *pool;
  }
  // Runs `work` (a call's handler) where PoolFor says, as its caller's
  // (so that callers take turns there); past the call's deadline it counts
  // as stuck (an elastic pool then starts another thread for the calls
  // behind it).
  void RunHandler(const AgentCall& call, const CancellationToken& cancel,
                  std::function<void()> work) {
    PoolFor(call).Submit(std::move(work), cancel.deadline(), call.principal());
  }
  // Runs work on the shared workers: what a gRPC thread must not do (a call
  // admitted when another freed the budget; a call whose end waits for its
  // device).
  // `tenant`: the call's caller, whose turn on the workers it is.
  BudgetWait::Executor Elsewhere(const std::string& tenant) {
    return [this, tenant](std::function<void()> work) {
      pool->Submit(std::move(work), absl::InfiniteFuture(), tenant);
    };
  }
  // On a device that is not the host's memory (cuda, rocm, oneapi), the
  // steps that move a call's bytes may wait for the device: an allocation
  // (cudaMalloc synchronises), a staging block whose last copy still runs, a
  // result block's copy to the host. Those steps run on the shared workers
  // there, one at a time per call, never on a gRPC thread. On cpu they are
  // memcpys into host memory, and run where the frame arrived.
  bool device_steps_on_workers = false;
  // Runs `step` of `call` (a reactor, kept alive meanwhile) as said above.
  void DeviceStep(RefCounted& call, const std::string& tenant, std::function<void()> step) {
    if (!device_steps_on_workers) return step();
    call.Ref();
    pool->Submit(
        [&call, step = std::move(step)] {
          step();
          call.Unref();
        },
        absl::InfiniteFuture(), tenant);
  }
  // Destroys a finished call now, or on a worker when that may wait for
  // its device.
  void Release(std::unique_ptr<AgentCall> call) {
    if (call == nullptr || !call->release_may_block()) return;  // freed here
    std::shared_ptr<AgentCall> c(std::move(call));
    const std::string tenant = c->principal();
    pool->Submit([c]() mutable { c.reset(); }, absl::InfiniteFuture(), tenant);
  }
};

// The Agent service (Execute, Call, Describe) over `shared`, which must
// outlive it.
std::unique_ptr<grpc::Service> NewAgentService(Shared& shared);

}  // namespace farcall::agent

#endif  // FARCALL_DEVICE_AGENTS_AGENT_REACTORS_H_
