// One call inside an agent, independent of the RPC that carries it:
// header -> validation -> device buffers -> chunks -> handler -> results.
//
// The Execute and Call RPCs (agent_service.cc) feed it request frames and
// take response frames from it, so both give the same codes and messages.
//
// Thread safety: thread-compatible. The RPC feeds frames from gRPC's
// threads and Run() happens on a worker, but never at the same time.
#ifndef FARCALL_DEVICE_AGENTS_AGENT_CALL_H_
#define FARCALL_DEVICE_AGENTS_AGENT_CALL_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/call_validation.h"
#include "core/chunk_assembler.h"
#include "core/tokens.h"
#include "core/wire/frame_codec.h"
#include "core/wire/header_limits.h"
#include "device_agents/admission.h"
#include "device_agents/call_ledger.h"
#include "device_agents/device.h"
#include "device_agents/fault_injection.h"
#include "device_agents/handler_registry.h"
#include "device_agents/handler_runtime.h"
#include "device_agents/shm_service.h"
#include "farcall/v1/farcall.pb.h"

namespace farcall::agent {

struct AgentConfig {
  std::string agent_id;  // empty: PLATFORM-agent-PORT
  Platform platform = Platform::kCpu;
  // How long, and within how many bytes of answers, call_ids of calls with
  // side effects are remembered.
  CallLedger::Options ledger;
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
  // The longest the built-in `sleep` may sleep (--max_sleep).
  absl::Duration max_sleep = absl::Minutes(10);
  // Which devices to serve and how much pinned staging memory each gets.
  BackendOptions backend;
  // Faults to inject into the devices (--inject_faults; tests only).
  FaultPlan faults;
};

// What every call of one agent shares. Read-only while serving.
struct AgentState {
  AgentConfig config;
  Backend backend;
  HandlerRegistry registry;
  std::unique_ptr<ShmService> shm;       // null: no same-host path offered
  std::unique_ptr<Admission> admission;  // the in-flight byte budget
  // call_ids of calls with side effects, so that none runs twice (null: not
  // recorded).
  std::unique_ptr<CallLedger> ledger;
  TokenTable tokens;  // empty: calls need no token

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

class AgentCall final : private FrameVisitor {
 public:
  // `peer` is gRPC's name for the caller: shared-memory regions serve only
  // their own user's calls (ShmService::Find).
  explicit AgentCall(AgentState& agent, std::string peer = "");
  ~AgentCall() override;
  AgentCall(const AgentCall&) = delete;
  AgentCall& operator=(const AgentCall&) = delete;

  // The call's life on the agent:
  //   Begin(first frame)   parse and validate the header: the contract's
  //                        errors, and RESOURCE_EXHAUSTED if the call could
  //                        never fit the in-flight budget;
  //   footprint()          the bytes to admit (the RPC waits for them);
  //   Admitted()           the bytes were reserved for it;
  //   Allocate()           device memory, or the client's shared region;
  //   OnRequestFrame(...)  every frame's chunks, the first one's included;
  //   EndOfInputs(), Run(), NextResponseFrame(...).
  absl::Status Begin(const grpc::ByteBuffer& first);
  int64_t footprint() const { return footprint_; }
  // The handler the header names (after Begin()).
  const std::string& handler_name() const { return header_.handler(); }
  bool has_side_effect() const { return header_.has_side_effect(); }
  // Whether destroying the call may wait for its device (a stream of
  // device work to synchronise): then it is destroyed on a worker, never
  // on a gRPC thread.
  bool release_may_block() const {
    return stream_ != nullptr && stream_->kind() != FARCALL_STREAM_NONE;
  }
  void Admitted();
  absl::Status Allocate();
  // Feeds one request frame's chunks. No frame but the first may carry a
  // header. Errors are the contract's (chunks, order).
  absl::Status OnRequestFrame(const grpc::ByteBuffer& frame);
  // At half-close: OK when every arg is complete.
  absl::Status EndOfInputs();
  // For a unary Call: RESOURCE_EXHAUSTED if the results cannot fit in one
  // response message.
  absl::Status CheckFitsOneMessage() const;
  // The handler's own threads, or null for the agent's shared workers. Known
  // after Begin().
  WorkerPool* handler_pool() const { return handler_ ? handler_->pool.get() : nullptr; }
  // Runs the handler on the calling (worker) thread.
  absl::Status Run(const CancellationToken& cancel);
  // Fills `out` with the next response frame carrying up to about
  // `max_chunk_bytes` of result data (0: everything). The first frame has the
  // header, the last the stats. False once everything was sent; an error
  // when a device copy of the results failed (the call must end with it).
  absl::StatusOr<bool> NextResponseFrame(int64_t max_chunk_bytes, grpc::ByteBuffer* out);

  // Records the call's outcome in the agent's metrics. Call once, with the
  // status the caller gets.
  // `answer` is a unary call's response message (kept for a repeat of a
  // call with side effects), or null.
  void RecordOutcome(const absl::Status& status, const grpc::ByteBuffer* answer = nullptr);
  // After Begin(): whether this call runs, or, when its call_id names a call
  // with side effects that ran or runs already, how it is answered instead.
  CallLedger::Claim ClaimRun();
  // Zeroes the results the agent allocated, before a handler that does not
  // declare FARCALL_TRAIT_WRITES_ALL_RESULTS runs.
  absl::Status ZeroResults();
  // Why the call was refused before it ran ("limit", "auth"), for
  // farcall_agent_refused_calls_total.
  void set_refused(const char* reason) { refused_ = reason; }

 private:
  struct Tensor {
    TensorSpec spec;
    int64_t size = 0;
    std::shared_ptr<DeviceMemory> memory;
    // Results of a unary Call on a device: the whole result on the host.
    std::shared_ptr<std::vector<uint8_t>> host_copy;
    uint8_t* host() const;
  };
  // A result range being copied to the host, for one response frame.
  struct PendingResult {
    std::unique_ptr<StagingBlock> block;
    uint32_t tensor = 0;
    int64_t offset = 0;
    int64_t size = 0;
  };

  absl::Status OnMessageField(uint32_t field, absl::string_view bytes) override;
  absl::Status OnChunk(uint32_t index, uint64_t offset, const ChunkBytes& data) override;
  // DEADLINE_EXCEEDED naming --max_call_seconds.
  absl::Status MaxCallTimeExceeded() const;
  // Places the tensors of a shared-memory call in its region.
  absl::Status PlaceInRegion(const ValidatedCall& v);
  // The least busy healthy device.
  absl::StatusOr<Device*> PickDevice();
  bool on_device() const { return !shm_ && stream_ != nullptr && !host_memory_; }

  // Device inputs: chunks gather in a staging block, which is copied to the
  // device asynchronously when full, so the copy of one block overlaps the
  // receiving of the next.
  absl::StatusOr<std::unique_ptr<StagingBlock>> NextStagingBlock(
      std::deque<std::unique_ptr<StagingBlock>>& in_flight, int64_t want);
  absl::Status StageChunk(uint32_t index, uint64_t offset, const ChunkBytes& data);
  absl::Status FlushInputBlock();
  // Device results: copies to the host run a few blocks ahead of sending.
  absl::Status FillResultPipeline(int64_t max_chunk_bytes);
  absl::Status CopyResultsToHost();

  AgentState& agent_;
  const std::string peer_;
  Device* device_ = nullptr;
  std::unique_ptr<Stream> stream_;
  bool host_memory_ = true;  // the device's memory is the host's (cpu)
  std::unique_ptr<StagingBlock> in_open_;
  uint32_t in_tensor_ = 0;
  int64_t in_offset_ = 0;
  int64_t in_fill_ = 0;
  std::deque<std::unique_ptr<StagingBlock>> in_flight_;
  std::deque<PendingResult> out_pending_;
  size_t copy_index_ = 0;  // the next result range to copy to the host
  int64_t copy_offset_ = 0;
  absl::Status device_error_;  // a failed result copy: the call ends with it
  int frames_ = 0;
  v1::CallHeader header_;
  std::optional<ValidatedCall> pending_;    // validated, not yet allocated
  std::optional<ValidatedCall> validated_;  // allocated
  int64_t footprint_ = 0;
  const char* refused_ = nullptr;
  bool in_ledger_ = false;  // ClaimRun recorded this call's id
  bool handler_ran_ = false;
  const RegisteredHandler* handler_ = nullptr;
  std::vector<Tensor> args_;
  std::vector<Tensor> results_;
  std::optional<ChunkAssembler> assembler_;
  int64_t admitted_bytes_ = 0;
  int64_t sent_bytes_ = 0;
  bool shm_ = false;  // tensors live in a client's region: no chunks

  // Response cursor.
  bool header_sent_ = false;
  size_t out_index_ = 0;
  int64_t out_offset_ = 0;

  absl::Time header_time_;
  absl::Time inputs_done_time_;
  absl::Time run_start_time_;
  absl::Time run_end_time_;
};

}  // namespace farcall::agent

#endif  // FARCALL_DEVICE_AGENTS_AGENT_CALL_H_
