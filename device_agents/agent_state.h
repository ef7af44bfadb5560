// An agent's configuration (AgentConfig) and what every call of the agent
// shares (AgentState): devices, handlers, the byte budget, the call-id
// ledger, tokens, and how a device failure is reported.
//
// Thread safety: AgentState is read-only while serving, but for its id and
// its device-failure report, which lock.
#ifndef FARCALL_DEVICE_AGENTS_AGENT_STATE_H_
#define FARCALL_DEVICE_AGENTS_AGENT_STATE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/caller_slots.h"
#include "core/capability.h"
#include "core/platform.h"
#include "core/tenant_labels.h"
#include "core/tokens.h"
#include "core/wire/header_limits.h"
#include "device_agents/admission.h"
#include "device_agents/call_ledger.h"
#include "device_agents/device.h"
#include "device_agents/fault_injection.h"
#include "device_agents/handler_registry.h"
#include "device_agents/resident_store.h"
#include "device_agents/shm_service.h"

namespace farcall::ucx {
class Worker;
}

namespace farcall::agent {

struct AgentConfig {
  std::string agent_id;  // empty: PLATFORM-agent-PORT
  Platform platform = Platform::kCpu;
  // How long, and within how many bytes of answers, call_ids of calls with
  // side effects are remembered.
  CallLedger::Options ledger;
  // Calls one caller (a principal) may have in flight at once
  // (--tenant_max_calls), and bytes they may hold at once
  // (--tenant_max_bytes); 0: no limit. A tokens-file line may set its
  // tenant's own.
  int64_t tenant_max_calls = 0;
  int64_t tenant_max_bytes = 0;
  // Largest footprint (args plus non-aliased results) of one call.
  int64_t max_call_bytes = int64_t{4} << 30;
  // Tensor bytes all calls in flight may hold together; 0: three quarters
  // of the memory the host, or the container's cgroup, allows.
  int64_t max_inflight_bytes = 0;
  // Chunk data per response message on Execute.
  int64_t response_chunk_bytes = 1 << 20;
  // Largest single gRPC message, which bounds what a unary Call can carry.
  int64_t max_message_bytes = 64 << 20;
  // What one call header may declare, checked before it is parsed.
  HeaderLimits header_limits;
  // The longest a call may run, from its header to its handler's end,
  // whatever deadline its client set (or none).
  absl::Duration max_call_time = absl::Hours(1);
  // A cpu agent runs a unary call whose footprint is at most this, to a
  // handler with FARCALL_TRAIT_QUICK, on the gRPC thread it arrived on
  // (--inline_call_bytes; 0: every call goes to a worker).
  int64_t inline_call_bytes = 64 << 10;
  // The longest the built-in `sleep` may sleep (--max_sleep).
  absl::Duration max_sleep = absl::Minutes(10);
  // Which devices to serve and how much pinned staging memory each gets.
  BackendOptions backend;
  // Faults to inject into the devices (--inject_faults; tests only).
  FaultPlan faults;
  // Resident arrays (resident_store.h). max_bytes 0: half the in-flight
  // budget.
  ResidentStore::Options residents;
};

// What every call of one agent shares. Read-only while serving.
struct AgentState {
  AgentConfig config;
  // The `tenant` label of per-call metrics (--metrics_max_tenants).
  TenantLabels tenant_labels{64};
  Backend backend;
  HandlerRegistry registry;
  std::unique_ptr<ShmService> shm;       // null: no same-host path offered
  std::shared_ptr<ucx::Worker> ucx;      // null: no UCX data plane offered
  std::unique_ptr<Admission> admission;  // the in-flight byte budget
  // call_ids of calls with side effects, so that none runs twice (null: not
  // recorded).
  std::unique_ptr<CallLedger> ledger;
  // Each caller's calls in flight.
  std::unique_ptr<CallerSlots> caller_slots;
  // Arrays clients keep here between calls.
  std::unique_ptr<ResidentStore> residents;
  TokenTable tokens;  // empty: calls need no token
  // Calls ended, and those that failed (AgentInfo.calls_total).
  std::atomic<uint64_t> calls_ended{0};
  std::atomic<uint64_t> calls_failed{0};
  // The last failed call (AgentInfo.last_failed_call), of `handler` ("-"
  // when none was named).
  void RecordFailure(const absl::Status& s, absl::string_view handler) const {
    absl::MutexLock l(&last_failure_mu);
    last_failure_code = absl::StatusCodeToString(s.code());
    last_failure_message = std::string(s.message().substr(0, 300));
    last_failure_handler = std::string(handler);
    last_failure_time = absl::Now();
  }
  // The last failure as a caller of Describe may see it, and when it came
  // (empty: none). Where calls come from several principals (tokens or
  // capabilities), only its code and handler: its message may hold another
  // tenant's data. Without them, "CODE: message".
  std::pair<std::string, absl::Time> LastFailure() const {
    const bool tenants = tokens.required() || verifier.has_value();
    absl::MutexLock l(&last_failure_mu);
    if (last_failure_code.empty()) return {"", absl::InfinitePast()};
    std::string text =
        tenants ? absl::StrCat(last_failure_code, " from handler '", last_failure_handler, "'")
                : absl::StrCat(last_failure_code, ": ", last_failure_message);
    if (text.size() > 300) text.resize(300);
    return {std::move(text), last_failure_time};
  }
  mutable absl::Mutex last_failure_mu;
  mutable std::string last_failure_code ABSL_GUARDED_BY(last_failure_mu);
  mutable std::string last_failure_message ABSL_GUARDED_BY(last_failure_mu);
  mutable std::string last_failure_handler ABSL_GUARDED_BY(last_failure_mu);
  mutable absl::Time last_failure_time ABSL_GUARDED_BY(last_failure_mu);
  std::optional<CapabilityVerifier> verifier;  // none: capabilities ignored

  // The id is final only once the port is bound, after serving has begun,
  // so it is read under a lock.
  std::string agent_id() const {
    absl::MutexLock l(&id_mu);
    return id;
  }
  void set_agent_id(std::string v) {
    absl::MutexLock l(&id_mu);
    id = std::move(v);
  }

  // A device hit a sticky error: the agent reports NOT_SERVING through
  // `on_device_failure` (set by the server; a failure reported before it is
  // set is passed on when it is).
  void ReportDeviceFailure(const absl::Status& error);
  void SetDeviceFailureHandler(std::function<void(const absl::Status&)> fn);

 private:
  mutable absl::Mutex id_mu;
  std::string id ABSL_GUARDED_BY(id_mu);
  absl::Mutex failure_mu;
  std::function<void(const absl::Status&)> on_device_failure ABSL_GUARDED_BY(failure_mu);
  absl::Status device_failure ABSL_GUARDED_BY(failure_mu);
};

}  // namespace farcall::agent

#endif  // FARCALL_DEVICE_AGENTS_AGENT_STATE_H_
