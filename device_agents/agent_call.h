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

#include <array>
#include <atomic>
#include <cstdint>
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
#include "core/caller_slots.h"
#include "core/chunk_assembler.h"
#include "core/tokens.h"
#include "core/wire/frame_codec.h"
#include "core/wire/header_limits.h"
#include "device_agents/admission.h"
#include "device_agents/agent_state.h"
#include "device_agents/call_ledger.h"
#include "device_agents/device.h"
#include "device_agents/device_staging.h"
#include "device_agents/fault_injection.h"
#include "device_agents/handler_registry.h"
#include "device_agents/handler_runtime.h"
#include "device_agents/serial_steps.h"
#include "device_agents/shm_service.h"
#include "device_agents/ucx_exchange.h"
#include "farcall/v1/farcall.pb.h"

namespace farcall::agent {

class AgentCall final : private FrameVisitor {
 public:
  // `peer` is gRPC's name for the caller: shared-memory regions serve only
  // their own user's calls (ShmService::Find).
  explicit AgentCall(AgentState& agent, std::string peer = "");
  ~AgentCall() override;
  AgentCall(const AgentCall&) = delete;
  AgentCall& operator=(const AgentCall&) = delete;

  // The call's life on the agent:
  //   ReadHeader(first)    parse the header, within the header limits;
  //   set_principal(...)   who calls, once the token may call the handler (or,
  //                        refused the handler, to name it in the audit line);
  //   Validate()           the contract's errors, and RESOURCE_EXHAUSTED if
  //                        the call could never fit the in-flight budget
  //                        (Begin() does both, for callers without tokens);
  //   footprint()          the bytes to admit (the RPC waits for them);
  //   Admitted()           the bytes were reserved for it;
  //   Allocate()           device memory, or the client's shared region;
  //   OnRequestFrame(...)  every frame's chunks, the first one's included;
  //   EndOfInputs(), Run(), NextResponseFrame(...).
  // A call over UCX (ucx() after Allocate) carries no chunks: between
  // OnRequestFrame and EndOfInputs its args arrive through
  // StartUcxInputs, and after Run its results leave through
  // StartUcxResults, before the (chunkless) answer.
  absl::Status ReadHeader(const grpc::ByteBuffer& first);
  absl::Status Validate();
  absl::Status Begin(const grpc::ByteBuffer& first);
  // The caller's principal (core/tokens.h): keys its entries in the
  // exactly-once ledger; "" without tokens.
  // `quota`: what its tokens-file line sets (0s: the agent's flags).
  void set_principal(std::string principal, TenantQuota quota = {}) {
    principal_ = std::move(principal);
    quota_ = quota;
    tenant_label_ = agent_.tenant_labels.Of(principal_);
  }
  const std::string& principal() const { return principal_; }
  // Its share of the budget: its tenant, and that tenant's byte quota.
  Admission::Tenant budget_tenant() const;
  // One of the caller's slots (--tenant_max_calls), given back when the
  // call ends; after set_principal.
  absl::Status TakeCallerSlot(CallerSlots& slots);
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
  // Whether a unary call may run on the thread it arrived on (after Begin):
  // a small call, on cpu, to a handler that declares FARCALL_TRAIT_QUICK
  // and runs on the shared workers otherwise.
  bool RunsInline() const;
  // Runs the handler on the calling (worker) thread.
  absl::Status Run(const CancellationToken& cancel);
  // For --inject_faults' exit_at (fault_injection.h): a stream's result
  // frames went as far as they did (`all_sent`: every one); or a call's
  // results are ready to go in one message, or are in the caller's region
  // already (every result phase at once).
  void ReachedResultPhases(bool all_sent) const;
  void ReachedResultPhasesAtOnce() const;
  // Fills `out` with the next response frame carrying up to about
  // `max_chunk_bytes` of result data (0: everything). The first frame has the
  // header, the last the stats. False once everything was sent; an error
  // when a device copy of the results failed (the call must end with it).
  absl::StatusOr<bool> NextResponseFrame(int64_t max_chunk_bytes, grpc::ByteBuffer* out);

  // Whether the tensors travel over UCX (after Allocate).
  bool ucx() const { return ucx_; }
  // Posts receives for the args over UCX and tells the client to send them.
  // `progress` runs as each piece lands (on the UCX worker's thread: it
  // must not block); `done` once all did, or with the first failure.
  // On a device that is not the host's memory each piece, once checked,
  // goes on toward the device through pinned staging blocks while later
  // pieces still travel: those copies run one at a time on `workers`, and
  // `done` runs there too, after the last. Elsewhere `done` runs on the UCX
  // worker's thread and must not block.
  void StartUcxInputs(std::function<void(int64_t)> progress,
                      std::function<void(const absl::Status&)> done, SerialSteps::Executor workers);
  // Sends the results to the client over UCX; `progress` and `done` as
  // above.
  void StartUcxResults(std::function<void(int64_t)> progress,
                       std::function<void(const absl::Status&)> done);
  // Ends the UCX transfers in flight (their `done` runs, CANCELLED).
  void CancelUcx();

  // Records the call's outcome in the agent's metrics and log and (with
  // side effects) in the ledger. Call once, with the status the agent
  // answers. `answer` is a unary call's response message (kept for a repeat
  // of a call with side effects), or null. `caller_gone`: what the caller
  // got instead of an answer (OK, or CANCELLED as gRPC dropped the call)
  // that came after its deadline passed or it cancelled (DEADLINE_EXCEEDED
  // or CANCELLED): counted and logged as that, while the ledger keeps the
  // answer for a repeat.
  void RecordOutcome(const absl::Status& status, const grpc::ByteBuffer* answer = nullptr,
                     const absl::Status& caller_gone = absl::OkStatus());
  // After Begin(): whether this call runs, or, when its call_id names a call
  // with side effects that ran or runs already, how it is answered instead.
  CallLedger::Claim ClaimRun();
  // Zeroes the results the agent allocated, before a handler that does not
  // declare FARCALL_TRAIT_WRITES_ALL_RESULTS runs.
  absl::Status ZeroResults();
  // Why the call was refused before it ran ("limit", "auth"), for
  // farcall_agent_refused_calls_total.
  void set_refused(const char* reason) { refused_ = reason; }
  // Whether the header names resident arrays (resident_store.h) in any way.
  static bool NamesResidents(const v1::CallHeader& header) {
    return !header.resident_args().empty() || !header.keep_results().empty() ||
           !header.release_residents().empty();
  }

 private:
  struct Tensor {
    TensorSpec spec;
    int64_t size = 0;
    std::shared_ptr<DeviceMemory> memory;
    // Results of a unary Call on a device: the whole result on the host.
    // Left uninitialized (HostBytes): a copy or a receive fills all of it.
    std::shared_ptr<uint8_t[]> host_copy;
    // A device call's shared-memory tensor: its place in the client's
    // region, copied to `memory` on the device before the handler runs
    // (args) and back after (results). Null otherwise.
    std::shared_ptr<DeviceMemory> region;
    // `memory` is the region's bytes themselves (Device::WrapHostMemory):
    // no copy in; the copy out only makes the device's writes visible.
    bool in_place = false;
    // A result that stays on the agent as this resident (its handle): its
    // bytes are not sent.
    std::string resident;
    uint8_t* host() const;
    // The bytes of it that travel back.
    int64_t sent_size() const { return resident.empty() ? size : 0; }
  };
  // The residents the header names: found for this caller, checked against
  // the call's specs, and room reserved for the results it keeps. Sets
  // device_ to theirs. Returns the bytes of resident args, which the call
  // does not bring (its footprint leaves them out).
  absl::StatusOr<int64_t> FindResidents(const ValidatedCall& v);
  // After the handler ran: keeps the results the call keeps, frees those it
  // releases.
  void SettleResidents();
  // A resident arg's Tensor: the resident's own memory.
  static Tensor ResidentTensor(const ResidentArray& r);
  absl::Status OnMessageField(uint32_t field, absl::string_view bytes) override;
  absl::Status OnChunk(uint32_t index, uint64_t offset, const ChunkBytes& data) override;
  // DEADLINE_EXCEEDED naming --max_call_seconds.
  absl::Status MaxCallTimeExceeded() const;
  // Places the tensors of a shared-memory call in its region. On a device,
  // each gets device memory too, and the args are copied in on the call's
  // stream, straight from the region (no staging); or, on a device that
  // shares the host's memory, the device uses the region in place.
  absl::Status PlaceInRegion(const ValidatedCall& v);
  // A device call's shared-memory results, copied back into the region.
  absl::Status CopyResultsToRegion();
  bool shm_on_device() const { return shm_ && agent_.config.platform != Platform::kCpu; }
  // Checks a UCX call's header part against what this agent offers.
  absl::Status CheckUcx() const;
  // The least busy healthy device.
  absl::StatusOr<Device*> PickDevice();
  bool on_device() const { return !shm_ && stream_ != nullptr && !host_memory_; }

  // Device results, all on the host at once, for a unary Call.
  absl::Status CopyResultsToHost();
  // A device call over UCX: its results into host memory, to be sent from.
  absl::Status CopyUcxResultsToHost();
  // On a shared worker: bytes [offset, offset + size) of arg `index`, which
  // landed in its host copy, on their way to the device.
  void StageUcxPiece(size_t index, int64_t offset, int64_t size);

  AgentState& agent_;
  const std::string peer_;
  std::string principal_;
  std::string tenant_label_ = "-";  // the metrics' `tenant` for principal_, looked up once
  TenantQuota quota_;
  CallerSlots* caller_slots_ = nullptr;  // a slot taken there, for principal_
  CallKey ledger_key_;                   // set by ClaimRun when the call is in the ledger
  Device* device_ = nullptr;
  std::unique_ptr<Stream> stream_;
  bool host_memory_ = true;  // the device's memory is the host's (cpu)
  // Device memory's bytes in and out (device_staging.h); after stream_, so
  // that their blocks go first.
  std::optional<InputStager> inputs_;
  std::optional<ResultPipeline> outputs_;
  absl::Status device_error_;  // a failed result copy: the call ends with it
  int frames_ = 0;
  v1::CallHeader header_;
  std::optional<ValidatedCall> pending_;    // validated, not yet allocated
  std::optional<ValidatedCall> validated_;  // allocated
  int64_t footprint_ = 0;
  int64_t tensor_bytes_ = 0;  // args plus non-aliased results
  const char* refused_ = nullptr;
  bool in_ledger_ = false;  // ClaimRun recorded this call's id
  bool handler_ran_ = false;
  const RegisteredHandler* handler_ = nullptr;
  std::vector<Tensor> args_;
  std::vector<Tensor> results_;
  // Resident arrays (resident_store.h): per arg, the resident it is (null:
  // none); the results kept, with the room reserved for them; the
  // residents freed once the call ran; their TTL.
  std::vector<std::shared_ptr<ResidentArray>> arg_residents_;
  std::vector<bool> keep_;
  int64_t reserved_bytes_ = 0;
  int reserved_count_ = 0;
  std::vector<std::shared_ptr<ResidentArray>> releases_;
  absl::Duration resident_ttl_;
  std::optional<ChunkAssembler> assembler_;
  int64_t admitted_bytes_ = 0;
  int64_t sent_bytes_ = 0;
  bool shm_ = false;                                 // tensors live in a client's region: no chunks
  std::vector<std::shared_ptr<ShmRegion>> regions_;  // the regions a shm call uses
  bool ucx_ = false;                                 // tensors travel over UCX: no chunks
  std::unique_ptr<UcxCallExchange> ucx_exchange_;    // its transfers, once they start
  int64_t ucx_received_bytes_ = 0;
  // On a device: the checked pieces' copies toward it, then `done`.
  std::unique_ptr<SerialSteps> ucx_steps_;
  absl::Status ucx_staged_;  // the first failed copy of a piece

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
