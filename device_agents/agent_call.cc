#include "device_agents/agent_call.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>
#include <map>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/error_reason.h"
#include "core/log.h"
#include "core/refusal_audit.h"
#include "core/resident_handle.h"
#include "core/status_macros.h"
#include "core/wire/header_digest.h"
#include "core/wire/proto_convert.h"
#include "core/wire/protocol.h"
#include "device_agents/agent_metrics.h"
#include "device_agents/fault_injection.h"
#include "device_agents/idle_watchdog.h"

namespace farcall::agent {
namespace {

// A tensor inside a client's shared-memory region; keeps the region mapped.
class RegionView final : public DeviceMemory {
 public:
  RegionView(std::shared_ptr<ShmRegion> region, uint64_t offset, int64_t size)
      : region_(std::move(region)), offset_(offset), size_(size) {}
  void* device_ptr() override { return region_->data() + offset_; }
  uint8_t* host_ptr() override { return region_->data() + offset_; }
  int64_t size() const override { return size_; }

 private:
  std::shared_ptr<ShmRegion> region_;
  uint64_t offset_;
  int64_t size_;
};

// What a call costs the agent beyond its tensors' bytes (the parsed header,
// the call's state, each tensor's spec and buffer), charged to the budget.
constexpr int64_t kCallOverheadBytes = 4096;
constexpr int64_t kTensorOverheadBytes = 512;

// Host memory for a device tensor's bytes, not zeroed first: what fills it
// (a device copy, UCX's receive) writes every byte before any is read.
std::shared_ptr<uint8_t[]> HostBytes(int64_t size) {
  return std::shared_ptr<uint8_t[]>(new uint8_t[static_cast<size_t>(size)]);
}

int64_t AddSaturating(int64_t a, int64_t b) {
  return a > std::numeric_limits<int64_t>::max() - b ? std::numeric_limits<int64_t>::max() : a + b;
}

}  // namespace

uint8_t* AgentCall::Tensor::host() const {
  if (host_copy != nullptr) return host_copy.get();
  return memory->host_ptr();
}

AgentCall::AgentCall(AgentState& agent, std::string peer) : agent_(agent), peer_(std::move(peer)) {
  Metrics().inflight_calls.With({}).Increment();
}

AgentCall::~AgentCall() {
  // UCX may still be writing the args or reading the results: take it back
  // before the memory goes.
  ucx_exchange_.reset();
  // Device work of this call may still read or write its memory (a call
  // cancelled while its inputs were being copied): finish it before the
  // memory goes back to the pool for other calls.
  if (stream_ != nullptr) stream_->Synchronize().IgnoreError();
  inputs_.reset();
  outputs_.reset();
  args_.clear();
  results_.clear();
  stream_.reset();
  if (device_ != nullptr) --device_->active_calls;
  if (reserved_count_ > 0 || reserved_bytes_ > 0) {
    agent_.residents->Unreserve(principal_, reserved_bytes_, reserved_count_);
  }
  arg_residents_.clear();
  releases_.clear();
  Metrics().inflight_calls.With({}).Decrement();
  if (caller_slots_ != nullptr) caller_slots_->Give(principal_);
  if (admitted_bytes_ > 0) {
    Metrics().inflight_bytes.With({}).Decrement(static_cast<double>(admitted_bytes_));
    // Last: this may resume calls that waited for these bytes.
    agent_.admission->Release(admitted_bytes_, principal_);
  }
}

absl::Status AgentCall::TakeCallerSlot(CallerSlots& slots) {
  if (caller_slots_ != nullptr) return absl::OkStatus();
  const CallerSlots::Limit limit{
      quota_.max_calls > 0 ? quota_.max_calls : agent_.config.tenant_max_calls,
      quota_.max_calls > 0};
  bool took = false;
  absl::Status s = slots.Take(principal_, limit, &took);
  if (took) caller_slots_ = &slots;
  return s;
}

Admission::Tenant AgentCall::budget_tenant() const {
  // Calls without a principal are one tenant, with no quota but the budget.
  if (principal_.empty()) return {};
  return {principal_, quota_.max_bytes > 0 ? quota_.max_bytes : agent_.config.tenant_max_bytes};
}

CallLedger::Claim AgentCall::ClaimRun() {
  if (!header_.has_side_effect() || header_.call_id().empty() || agent_.ledger == nullptr) {
    return {};
  }
  ledger_key_ = {principal_, header_.call_id(), HeaderDigest(header_), quota_.ledger_bytes};
  CallLedger::Claim c = agent_.ledger->Begin(ledger_key_);
  in_ledger_ = c.run;
  return c;
}

void AgentCall::RecordOutcome(const absl::Status& answered, const grpc::ByteBuffer* answer,
                              const absl::Status& caller_gone) {
  // The caller's view: an answer after its deadline (or its cancel) went to
  // no one, and a stream that ended when gRPC dropped it then was
  // DEADLINE_EXCEEDED to the caller, not CANCELLED.
  const bool superseded = answered.ok() || absl::IsCancelled(answered);
  const absl::Status& status = superseded && !caller_gone.ok() ? caller_gone : answered;
  if (in_ledger_) {
    in_ledger_ = false;
    if (handler_ran_) {
      // A shared-memory answer names places in this call's own regions,
      // which a repeat does not share: it is never kept.
      // Nor is a UCX answer, whose results went over UCX.
      agent_.ledger->Ran(ledger_key_, answered, shm_ || ucx_ ? nullptr : answer);
    } else {
      agent_.ledger->Forget(ledger_key_);
    }
  }
  AgentMetrics& m = Metrics();
  const std::string platform(PlatformName(agent_.config.platform));
  // Only registered names become label values, so that callers cannot grow
  // the label set without bound.
  const std::string handler = handler_ != nullptr ? handler_->name : "-";
  const std::string& tenant = tenant_label_;
  m.calls.With({platform, handler, absl::StatusCodeToString(status.code()), tenant}).Increment();
  agent_.calls_ended.fetch_add(1, std::memory_order_release);
  if (!status.ok()) {
    agent_.calls_failed.fetch_add(1, std::memory_order_relaxed);
    agent_.RecordFailure(status, handler);
  }
  if (refused_ != nullptr) m.refused.With({refused_, tenant}).Increment();
  if (!status.ok() || log::DebugEnabled()) {
    const std::string code = absl::StatusCodeToString(status.code());
    if (refused_ != nullptr && !status.ok()) {
      // Anyone who reaches the port can cause these: aggregated per peer,
      // caller and reason (core/refusal_audit.h); no line of their own is
      // made.
      RefusalAudit::Get().Note({peer_, principal_, refused_, handler, code, status.message()});
    } else {
      const std::string call_id = log::PrintableCallId(header_.call_id());
      const std::string line = absl::StrCat(
          "call ", call_id, " ", handler, " on ", platform, " from ", peer_.empty() ? "-" : peer_,
          ": ", code,
          status.ok() ? absl::StrCat(" in ", absl::FormatDuration(absl::Now() - header_time_))
                      : absl::StrCat(": ", status.message().substr(0, 512)));
      log::Write(status.ok() ? log::Level::kDebug : log::Level::kWarning, line,
                 {call_id, handler, principal_, peer_, code});
    }
  }
  if (assembler_) {
    m.received.With({platform, tenant})
        .Increment(static_cast<double>(assembler_->received_bytes() + ucx_received_bytes_));
  }
  m.sent.With({platform, tenant}).Increment(static_cast<double>(sent_bytes_));
  if (status.ok()) {
    m.queue.With({platform, handler, tenant})
        .Observe(absl::ToDoubleSeconds(run_start_time_ - inputs_done_time_));
    m.transfer.With({platform, handler, tenant})
        .Observe(absl::ToDoubleSeconds(inputs_done_time_ - header_time_));
    m.execute.With({platform, handler, tenant})
        .Observe(absl::ToDoubleSeconds(run_end_time_ - run_start_time_));
    m.call.With({platform, handler, tenant})
        .Observe(absl::ToDoubleSeconds(absl::Now() - header_time_));
  }
}

absl::Status AgentCall::Begin(const grpc::ByteBuffer& first) {
  FARCALL_RETURN_IF_ERROR(ReadHeader(first));
  return Validate();
}

absl::Status AgentCall::ReadHeader(const grpc::ByteBuffer& first) {
  header_time_ = absl::Now();
  FARCALL_ASSIGN_OR_RETURN(
      bool found, DecodeMessageField(first, kHeaderField, &header_, &agent_.config.header_limits));
  if (!found) {
    return MissingHeaderError();
  }
  return absl::OkStatus();
}

absl::Status AgentCall::Validate() {
  const AgentConfig& cfg = agent_.config;
  FARCALL_ASSIGN_OR_RETURN(ValidatedCall v,
                           ValidateCall(DescriptorFromProto(header_), cfg.max_call_bytes, "agent"));
  const absl::string_view served = PlatformName(cfg.platform);
  const bool gpu = cfg.platform == Platform::kCuda || cfg.platform == Platform::kRocm;
  if (v.any_gpu ? !gpu : v.platform != cfg.platform) {
    return PlatformNotServedError(served, v.any_gpu ? "gpu" : PlatformName(v.platform));
  }
  handler_ = agent_.registry.Find(header_.handler(), served);
  if (handler_ == nullptr) {
    std::vector<std::string> registered;
    for (const RegisteredHandler* h : agent_.registry.List(served)) registered.push_back(h->name);
    return HandlerNotFoundError(header_.handler(), served, std::move(registered));
  }
  // Resident args are on the agent already: they are not the call's to bring.
  FARCALL_ASSIGN_OR_RETURN(const int64_t resident_arg_bytes, FindResidents(v));
  if (device_ == nullptr) {
    FARCALL_ASSIGN_OR_RETURN(device_, PickDevice());
  }
  ++device_->active_calls;
  // Shared-memory tensors live in the client's region, but the agent maps
  // and touches them all the same: they count against the budget too. So
  // does the call's own bookkeeping, so that calls of empty tensors are not
  // free.
  tensor_bytes_ = v.footprint_bytes - resident_arg_bytes;
  footprint_ = AddSaturating(
      tensor_bytes_,
      kCallOverheadBytes + kTensorOverheadBytes * (header_.args_size() + header_.results_size()));
  // A device agent's UCX call holds its tensors twice: in device memory,
  // and in the host memory the pieces land in and leave from.
  if (header_.has_ucx() && agent_.config.platform != Platform::kCpu) {
    footprint_ = AddSaturating(footprint_, v.footprint_bytes);
  }
  if (footprint_ > agent_.admission->budget()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the call needs ", footprint_, " bytes, over the agent's budget of ",
                     agent_.admission->budget(),
                     " bytes for calls in flight (--max_inflight_bytes); it can never run here."));
  }
  if (const Admission::Tenant t = budget_tenant(); t.max_bytes > 0 && footprint_ > t.max_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the call needs ", footprint_, " bytes, over this caller's quota of ", t.max_bytes,
        " bytes in flight (",
        quota_.max_bytes > 0 ? "max_bytes on its tokens-file line" : "--tenant_max_bytes",
        "); it can never run here."));
  }
  pending_ = std::move(v);
  return absl::OkStatus();
}

void AgentCall::Admitted() {
  admitted_bytes_ = footprint_;
  AgentMetrics& m = Metrics();
  m.inflight_bytes.With({}).Increment(static_cast<double>(admitted_bytes_));
  m.admission.With({std::string(PlatformName(agent_.config.platform)), tenant_label_})
      .Observe(absl::ToDoubleSeconds(absl::Now() - header_time_));
}

absl::StatusOr<int64_t> AgentCall::FindResidents(const ValidatedCall& v) {
  if (!NamesResidents(header_)) return 0;
  if (header_.has_ucx() || (header_.has_shm() && header_.keep_results_size() > 0)) {
    return absl::FailedPreconditionError(
        absl::StrCat("a call that ",
                     header_.keep_results_size() > 0 ? "keeps results as resident arrays"
                                                     : "names resident arrays",
                     " sends its other tensors as chunks",
                     header_.keep_results_size() > 0 ? "" : " or in shared memory", ", not over ",
                     header_.has_ucx() ? "UCX." : "shared memory."));
  }
  if (agent_.residents == nullptr) {
    return absl::FailedPreconditionError("this agent keeps no resident arrays.");
  }
  ResidentStore& store = *agent_.residents;
  const std::string agent_id = agent_.agent_id();
  Device* device = nullptr;
  auto on_one_device = [&](const ResidentArray& r, absl::string_view where) -> absl::Status {
    if (device == nullptr) device = r.device;
    if (r.device != device) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, " names a resident on device ", r.device->ordinal(),
                       ", and another one the call names is on device ", device->ordinal(),
                       "; a call runs on one device."));
    }
    return absl::OkStatus();
  };
  arg_residents_.assign(static_cast<size_t>(header_.args_size()), nullptr);
  int64_t arg_bytes = 0;
  // In index order, so that the first bad one is named whatever the map's order.
  const std::map<uint32_t, std::string> named(header_.resident_args().begin(),
                                              header_.resident_args().end());
  for (const auto& [i, handle] : named) {
    if (i >= static_cast<uint32_t>(header_.args_size())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "resident_args names args[", i, "], but the call has ", header_.args_size(), " args."));
    }
    const std::string where = absl::StrCat("args[", i, "]");
    FARCALL_ASSIGN_OR_RETURN(std::shared_ptr<ResidentArray> r,
                             store.Find(handle, principal_, agent_id, where));
    const TensorSpec declared = SpecFromProto(header_.args(static_cast<int>(i)));
    if (!(declared == r->spec)) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, " names resident ", ShortHandle(handle), " of ", SpecToString(r->spec),
          ", but the call declares it ", SpecToString(declared), "."));
    }
    FARCALL_RETURN_IF_ERROR(on_one_device(*r, where));
    arg_bytes += r->size;
    arg_residents_[i] = std::move(r);
  }
  keep_.assign(static_cast<size_t>(header_.results_size()), false);
  int64_t keep_bytes = 0;
  int keep_count = 0;
  for (int k = 0; k < header_.keep_results_size(); ++k) {
    const uint32_t o = header_.keep_results(k);
    if (o >= static_cast<uint32_t>(header_.results_size())) {
      return absl::InvalidArgumentError(absl::StrCat("keep_results[", k, "] is ", o,
                                                     ", but the call has ", header_.results_size(),
                                                     " results."));
    }
    if (keep_[o]) {
      return absl::InvalidArgumentError(absl::StrCat("keep_results names results[", o, "] twice."));
    }
    keep_[o] = true;
    const int64_t alias = v.result_alias[o];
    if (alias >= 0 && arg_residents_[alias] != nullptr) continue;  // it stays anyway
    keep_bytes += v.result_bytes[o];
    ++keep_count;
  }
  for (int k = 0; k < header_.release_residents_size(); ++k) {
    const std::string where = absl::StrCat("release_residents[", k, "]");
    FARCALL_ASSIGN_OR_RETURN(std::shared_ptr<ResidentArray> r,
                             store.Find(header_.release_residents(k), principal_, agent_id, where));
    releases_.push_back(std::move(r));
  }
  FARCALL_ASSIGN_OR_RETURN(resident_ttl_, store.TtlFor(header_.resident_ttl_ms()));
  if (keep_count > 0) {
    const Admission::Tenant t = budget_tenant();
    FARCALL_RETURN_IF_ERROR(store.Reserve(
        principal_, keep_bytes, keep_count, t.max_bytes,
        quota_.max_bytes > 0 ? "max_bytes on its tokens-file line" : "--tenant_max_bytes"));
    reserved_bytes_ = keep_bytes;
    reserved_count_ = keep_count;
  }
  if (device != nullptr) {
    if (absl::Status h = device->health(); !h.ok()) {
      return absl::UnavailableError(absl::StrCat(
          "the device that holds the call's resident arrays has failed: ", h.message()));
    }
    device_ = device;
  }
  return arg_bytes;
}

AgentCall::Tensor AgentCall::ResidentTensor(const ResidentArray& r) {
  Tensor t;
  t.spec = r.spec;
  t.size = r.size;
  t.memory = r.memory;
  return t;
}

void AgentCall::SettleResidents() {
  if (keep_.empty() && releases_.empty()) return;
  const std::string agent_id = agent_.agent_id();
  const std::string tenant = budget_tenant().name;
  for (size_t o = 0; o < keep_.size(); ++o) {
    Tensor& t = results_[o];
    if (!keep_[o] || !t.resident.empty()) continue;
    t.resident = agent_.residents->Keep(principal_, tenant, t.spec, t.size, t.memory, device_,
                                        resident_ttl_, agent_id);
    // Its bytes stay in the budget for the resident, not for this call.
    admitted_bytes_ -= t.size;
    Metrics().inflight_bytes.With({}).Decrement(static_cast<double>(t.size));
    reserved_bytes_ -= t.size;
    --reserved_count_;
  }
  for (const std::shared_ptr<ResidentArray>& r : releases_) agent_.residents->Release(r->handle);
  releases_.clear();
}

absl::StatusOr<Device*> AgentCall::PickDevice() {
  Device* best = nullptr;
  absl::Status last_error;
  for (const auto& d : agent_.backend.devices) {
    absl::Status h = d->health();
    if (!h.ok()) {
      last_error = h;
      continue;
    }
    if (best == nullptr || d->active_calls.load() < best->active_calls.load()) {
      best = d.get();
    }
  }
  if (best == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("every ", PlatformName(agent_.config.platform),
                     " device of this agent has failed; the last error: ", last_error.message()));
  }
  return best;
}

absl::Status AgentCall::Allocate() {
  ValidatedCall v = *std::move(pending_);
  pending_.reset();
  FARCALL_ASSIGN_OR_RETURN(stream_, device_->AcquireStream());
  if (header_.has_shm() && header_.has_ucx()) {
    return absl::InvalidArgumentError(
        "the call names both shm and ucx; its tensors travel one way only.");
  }
  if (header_.has_ucx()) FARCALL_RETURN_IF_ERROR(CheckUcx());
  if (header_.has_shm()) {
    FARCALL_RETURN_IF_ERROR(PlaceInRegion(v));
    assembler_.emplace("args", std::vector<ChunkAssembler::Target>());
    validated_ = std::move(v);
    return absl::OkStatus();
  }
  auto allocate = [&](const TensorSpec& spec, int64_t size) -> absl::StatusOr<Tensor> {
    Tensor t;
    t.spec = spec;
    t.size = size;
    FARCALL_ASSIGN_OR_RETURN(std::unique_ptr<DeviceMemory> m, device_->Allocate(size));
    t.memory = std::move(m);
    if (t.memory->host_ptr() == nullptr) host_memory_ = false;
    return t;
  };
  std::vector<ChunkAssembler::Target> targets;
  for (int i = 0; i < header_.args_size(); ++i) {
    if (!arg_residents_.empty() && arg_residents_[i] != nullptr) {
      // On the agent already: no chunks come for it.
      Tensor t = ResidentTensor(*arg_residents_[i]);
      if (t.memory->host_ptr() == nullptr) host_memory_ = false;
      targets.push_back({t.spec, 0, nullptr});
      args_.push_back(std::move(t));
      continue;
    }
    FARCALL_ASSIGN_OR_RETURN(Tensor t, allocate(SpecFromProto(header_.args(i)), v.arg_bytes[i]));
    targets.push_back({t.spec, t.size, t.host()});
    args_.push_back(std::move(t));
  }
  for (int o = 0; o < header_.results_size(); ++o) {
    if (v.result_alias[o] >= 0) {
      // An aliased result is its input's memory: no second buffer. Aliased
      // to a resident, it stays that resident, updated in place.
      results_.push_back(args_[v.result_alias[o]]);
      if (!arg_residents_.empty() && arg_residents_[v.result_alias[o]] != nullptr) {
        results_.back().resident = arg_residents_[v.result_alias[o]]->handle;
      }
      continue;
    }
    FARCALL_ASSIGN_OR_RETURN(Tensor t,
                             allocate(SpecFromProto(header_.results(o)), v.result_bytes[o]));
    results_.push_back(std::move(t));
  }
  if (header_.has_ucx()) {
    ucx_ = true;  // the args arrive over UCX, not in chunks
    targets.clear();
  }
  assembler_.emplace("args", std::move(targets));
  validated_ = std::move(v);
  return absl::OkStatus();
}

absl::Status AgentCall::CheckUcx() const {
  if (agent_.ucx == nullptr) {
    return absl::FailedPreconditionError(
        "this agent offers no UCX data plane; send the tensors as chunks.");
  }
  const v1::UcxTensors& u = header_.ucx();
  if (u.worker_address().empty() || u.worker_address().size() > 4096) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ucx.worker_address must hold 1 to 4096 bytes; it holds ", u.worker_address().size(), "."));
  }
  if (u.key().size() != kUcxKeyBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ucx.key must hold ", kUcxKeyBytes, " random bytes; it holds ", u.key().size(), "."));
  }
  return absl::OkStatus();
}

void AgentCall::StartUcxInputs(std::function<void(int64_t)> progress,
                               std::function<void(const absl::Status&)> done,
                               SerialSteps::Executor workers) {
  ucx_exchange_ = std::make_unique<UcxCallExchange>(*agent_.ucx, header_.ucx());
  std::vector<int64_t> sizes;
  std::vector<uint8_t*> places;
  for (Tensor& t : args_) {
    // Device memory: the pieces land in host memory, and go on to the
    // device as each is checked (StageUcxPiece).
    if (t.memory->host_ptr() == nullptr) {
      t.host_copy = HostBytes(t.size);
    }
    sizes.push_back(t.size);
    places.push_back(t.host());
  }
  UcxCallExchange::Range checked;
  if (on_device()) {
    ucx_steps_ = std::make_unique<SerialSteps>(std::move(workers));
    checked = [this](size_t index, int64_t offset, int64_t size) {
      ucx_steps_->Add([this, index, offset, size] { StageUcxPiece(index, offset, size); });
    };
    // After the copies of every piece that landed.
    done = [this, done = std::move(done)](const absl::Status& s) {
      ucx_steps_->Add([done, s] { done(s); });
    };
  }
  ucx_exchange_->ReceiveArgs(sizes, places, std::move(progress), std::move(checked),
                             [this, sizes, done = std::move(done)](const absl::Status& s) {
                               if (s.ok()) {
                                 for (int64_t n : sizes) ucx_received_bytes_ += n;
                               }
                               done(s);
                             });
}

void AgentCall::StageUcxPiece(size_t index, int64_t offset, int64_t size) {
  if (!ucx_staged_.ok()) return;  // the call ends with the first failure
  Tensor& t = args_[index];
  if (!inputs_) inputs_.emplace(*device_, *stream_);
  ucx_staged_ =
      inputs_->Stage(static_cast<uint32_t>(index), *t.memory, t.size, static_cast<uint64_t>(offset),
                     t.host_copy.get() + offset, static_cast<uint64_t>(size));
}

void AgentCall::StartUcxResults(std::function<void(int64_t)> progress,
                                std::function<void(const absl::Status&)> done) {
  std::vector<int64_t> sizes;
  std::vector<const uint8_t*> data;
  for (const Tensor& t : results_) {
    sizes.push_back(t.size);
    data.push_back(t.host());
    sent_bytes_ += t.size;
  }
  ucx_exchange_->SendResults(sizes, data, std::move(progress), std::move(done));
}

void AgentCall::CancelUcx() {
  if (ucx_exchange_ != nullptr) ucx_exchange_->Cancel();
}

absl::Status AgentCall::OnRequestFrame(const grpc::ByteBuffer& frame) {
  ++frames_;
  return DecodeFrame(frame, *this);
}

absl::Status AgentCall::OnMessageField(uint32_t field, absl::string_view bytes) {
  if (field != kHeaderField) {
    return absl::InvalidArgumentError(absl::StrCat("request message ", frames_, " has field ",
                                                   field, ", which requests do not use."));
  }
  if (frames_ > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "request message ", frames_, " carries a call header; only the first message may."));
  }
  return absl::OkStatus();  // the first message's header was read by Begin()
}

absl::Status AgentCall::PlaceInRegion(const ValidatedCall& v) {
  if (agent_.shm == nullptr) {
    return absl::FailedPreconditionError(
        "this agent offers no shared memory; send the tensors as chunks.");
  }
  shm_ = true;  // its tensors live in the client's region: no chunks
  const v1::ShmTensors& shm = header_.shm();
  if (shm.arg_offsets_size() != header_.args_size() ||
      shm.result_offsets_size() != header_.results_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("shm gives ", shm.arg_offsets_size(), " arg and ", shm.result_offsets_size(),
                     " result offsets for ", header_.args_size(), " args and ",
                     header_.results_size(), " results."));
  }
  auto place = [&](const char* kind, int i, const std::string& token, uint64_t offset, int64_t size,
                   const v1::TensorSpec& spec) -> absl::StatusOr<Tensor> {
    FARCALL_ASSIGN_OR_RETURN(std::shared_ptr<ShmRegion> region,
                             agent_.shm->Find(token.empty() ? shm.region() : token, peer_));
    if (std::find(regions_.begin(), regions_.end(), region) == regions_.end()) {
      regions_.push_back(region);
    }
    if (offset > region->size() || static_cast<uint64_t>(size) > region->size() - offset) {
      return absl::InvalidArgumentError(
          absl::StrCat(kind, "[", i, "] at [", offset, ", ", offset + size,
                       ") lies outside shared-memory region of ", region->size(), " bytes."));
    }
    Tensor t;
    t.spec = SpecFromProto(spec);
    t.size = size;
    t.memory = std::make_shared<RegionView>(region, offset, size);
    if (shm_on_device()) {
      t.region = std::move(t.memory);
      // In place where the device shares the host's memory; else memory of
      // the device's own, which the region is copied into and out of.
      absl::StatusOr<std::unique_ptr<DeviceMemory>> wrapped =
          device_->WrapHostMemory(region->data() + offset, size);
      if (!wrapped.ok()) Metrics().staging_fallbacks.With({}).Increment();
      if (wrapped.ok() && *wrapped != nullptr) {
        t.memory = *std::move(wrapped);
        t.in_place = true;
      } else {
        FARCALL_ASSIGN_OR_RETURN(t.memory, device_->Allocate(size));
      }
    }
    return t;
  };
  for (int i = 0; i < header_.args_size(); ++i) {
    if (!arg_residents_.empty() && arg_residents_[i] != nullptr) {
      args_.push_back(ResidentTensor(*arg_residents_[i]));  // on the agent: not in the region
      continue;
    }
    const std::string& token = i < shm.arg_regions_size() ? shm.arg_regions(i) : "";
    FARCALL_ASSIGN_OR_RETURN(
        Tensor t, place("args", i, token, shm.arg_offsets(i), v.arg_bytes[i], header_.args(i)));
    args_.push_back(std::move(t));
  }
  for (int o = 0; o < header_.results_size(); ++o) {
    if (v.result_alias[o] >= 0) {
      results_.push_back(args_[v.result_alias[o]]);
      if (!arg_residents_.empty() && arg_residents_[v.result_alias[o]] != nullptr) {
        results_.back().resident = arg_residents_[v.result_alias[o]]->handle;
      }
      continue;
    }
    const std::string& token = o < shm.result_regions_size() ? shm.result_regions(o) : "";
    FARCALL_ASSIGN_OR_RETURN(Tensor t, place("results", o, token, shm.result_offsets(o),
                                             v.result_bytes[o], header_.results(o)));
    results_.push_back(std::move(t));
  }
  if (shm_on_device()) {
    // Each region the call uses is pinned for this device once, while it
    // is mapped, so the copies go as DMA. One that cannot be pinned is
    // copied all the same (the runtime stages it), and counted.
    for (const std::shared_ptr<ShmRegion>& region : regions_) {
      Device* device = device_;
      absl::StatusOr<std::shared_ptr<void>> pinned = region->KeepWhileMapped(device, [&] {
        absl::StatusOr<std::shared_ptr<void>> p =
            device->PinHostMemory(region->data(), region->size());
        if (!p.ok()) Metrics().staging_fallbacks.With({}).Increment();
        return p;
      });
      (void)pinned;  // pinned, not needed, or failed: the copies work either way
    }
    for (Tensor& t : args_) {
      if (t.in_place || t.region == nullptr) continue;  // the region itself, or a resident
      FARCALL_RETURN_IF_ERROR(stream_->CopyToDevice(t.region->host_ptr(), *t.memory, 0, t.size));
    }
  }
  return absl::OkStatus();
}

absl::Status AgentCall::CopyResultsToRegion() {
  for (Tensor& t : results_) {
    if (!t.resident.empty()) continue;  // stays on the device
    // An aliased result is its arg's Tensor: its region is the arg's place.
    // In place, this read into the bytes themselves makes the device's
    // writes visible there.
    FARCALL_RETURN_IF_ERROR(stream_->CopyToHost(*t.memory, 0, t.size, t.region->host_ptr()));
  }
  return stream_->Synchronize();
}

absl::Status AgentCall::OnChunk(uint32_t index, uint64_t offset, const ChunkBytes& data) {
  if (!validated_) {
    return MissingHeaderError();
  }
  if (shm_) {
    return absl::InvalidArgumentError(
        "a shared-memory call carries no chunks; its tensors are in the region.");
  }
  if (ucx_) {
    return absl::InvalidArgumentError("a UCX call carries no chunks; its tensors travel over UCX.");
  }
  if (index < arg_residents_.size() && arg_residents_[index] != nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("a chunk came for args[", index,
                     "], a resident array: its bytes are on the agent, and none are sent."));
  }
  FARCALL_ASSIGN_OR_RETURN(uint8_t * dst, assembler_->Accept(index, offset, data.size()));
  ReachedPhase(CallPhase::kUpload);
  if (dst == nullptr) {  // device memory: through staging blocks
    if (!inputs_) inputs_.emplace(*device_, *stream_);
    return inputs_->Stage(index, *args_[index].memory, args_[index].size, offset, data);
  }
  data.CopyTo(dst);
  return absl::OkStatus();
}

absl::Status AgentCall::EndOfInputs() {
  if (!validated_) {
    return absl::InvalidArgumentError("the call ended before its header was sent.");
  }
  FARCALL_RETURN_IF_ERROR(assembler_->Finish());
  FARCALL_RETURN_IF_ERROR(ucx_staged_);
  if (inputs_) FARCALL_RETURN_IF_ERROR(inputs_->Finish());
  inputs_done_time_ = absl::Now();
  return absl::OkStatus();
}

absl::Status AgentCall::CheckFitsOneMessage() const {
  if (shm_ || ucx_) return absl::OkStatus();
  int64_t total = 0;
  for (const Tensor& t : results_) total += t.sent_size();
  // Leave room for the header and framing.
  const int64_t limit = agent_.config.max_message_bytes - (64 << 10);
  if (total > limit) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the results need ", total, " bytes, over the ", limit,
                     " bytes one Call response can carry; use Execute."));
  }
  return absl::OkStatus();
}

absl::Status AgentCall::MaxCallTimeExceeded() const {
  return MaxCallTimeError(agent_.config.max_call_time);
}

absl::Status AgentCall::ZeroResults() {
  // The client's own shared memory holds only its own bytes already (on a
  // device, the results' device memory is zeroed as any call's; a result
  // the device uses in place is the client's region itself, left as the
  // client had it, as on cpu).
  if (shm_ && !shm_on_device()) return absl::OkStatus();
  static const auto* zeros = new std::vector<uint8_t>(size_t{1} << 20, 0);
  for (size_t o = 0; o < results_.size(); ++o) {
    if (validated_->result_alias[o] >= 0) continue;
    Tensor& t = results_[o];
    if (t.in_place) continue;
    if (uint8_t* host = t.memory->host_ptr()) {
      std::memset(host, 0, static_cast<size_t>(t.size));
      continue;
    }
    for (int64_t off = 0; off < t.size; off += static_cast<int64_t>(zeros->size())) {
      const int64_t n = std::min<int64_t>(t.size - off, static_cast<int64_t>(zeros->size()));
      FARCALL_RETURN_IF_ERROR(stream_->CopyToDevice(zeros->data(), *t.memory, off, n));
    }
  }
  return absl::OkStatus();
}

bool AgentCall::RunsInline() const {
  return handler_ != nullptr && handler_->pool == nullptr &&
         (handler_->traits & FARCALL_TRAIT_QUICK) != 0 &&
         agent_.config.platform == Platform::kCpu && agent_.config.inline_call_bytes > 0 &&
         tensor_bytes_ <= agent_.config.inline_call_bytes;
}

void AgentCall::ReachedResultPhases(bool all_sent) const {
  if (!PhaseExitArmed()) return;  // every result frame of every call comes here
  int64_t total = 0;
  for (const Tensor& t : results_) total += t.sent_size();
  if (sent_bytes_ > 0) ReachedPhase(CallPhase::kResultFirst);
  if (sent_bytes_ > 0 && sent_bytes_ * 2 >= total) ReachedPhase(CallPhase::kResultMid);
  if (all_sent) ReachedPhase(CallPhase::kResultLast);
}

void AgentCall::ReachedResultPhasesAtOnce() const {
  ReachedPhase(CallPhase::kResultFirst);
  ReachedPhase(CallPhase::kResultMid);
  ReachedPhase(CallPhase::kResultLast);
}

absl::Status AgentCall::Run(const CancellationToken& cancel) {
  ReachedPhase(CallPhase::kHandler);
  run_start_time_ = absl::Now();
  if (cancel.deadline_passed()) return MaxCallTimeExceeded();
  if (cancel.cancelled()) {
    return absl::CancelledError("the call was cancelled before its handler ran.");
  }
  HandlerInvocation inv;
  inv.platform = std::string(PlatformName(agent_.config.platform));
  inv.device_ordinal = device_->ordinal();
  inv.stream_kind = stream_->kind();
  inv.stream = stream_->native();
  inv.cancel = &cancel;
  auto buffer = [](const Tensor& t, int64_t alias) {
    return MakeBuffer(static_cast<int32_t>(t.spec.dtype), t.spec.dims, t.memory->device_ptr(),
                      static_cast<uint64_t>(t.size), alias);
  };
  for (const Tensor& t : args_) {
    inv.args.push_back(buffer(t, -1));
    inv.arg_owners.push_back(t.memory);
  }
  for (size_t o = 0; o < results_.size(); ++o) {
    inv.results.push_back(buffer(results_[o], validated_->result_alias[o]));
    inv.result_owners.push_back(results_[o].memory);
  }
  for (const auto& [name, attr] : header_.attributes()) {
    if (!handler_->invoke && absl::StartsWith(name, kReservedAttributePrefix)) continue;
    switch (attr.value_case()) {
      case v1::Attribute::kI64:
        inv.attrs.push_back(MakeI64Attribute(name, attr.i64()));
        break;
      case v1::Attribute::kF64:
        inv.attrs.push_back(MakeF64Attribute(name, attr.f64()));
        break;
      case v1::Attribute::kB:
        inv.attrs.push_back(MakeBoolAttribute(name, attr.b()));
        break;
      case v1::Attribute::kStr:
        inv.attrs.push_back(MakeStrAttribute(name, attr.str()));
        break;
      case v1::Attribute::VALUE_NOT_SET:
        return absl::InvalidArgumentError(absl::StrCat("attribute '", name, "' has no value."));
    }
  }
  // One call at a time uses a resident: none reads one that another writes.
  std::vector<ResidentArray*> used;
  for (const std::shared_ptr<ResidentArray>& r : arg_residents_) {
    if (r != nullptr) used.push_back(r.get());
  }
  std::sort(used.begin(), used.end());
  used.erase(std::unique(used.begin(), used.end()), used.end());
  for (ResidentArray* r : used) r->use.Lock();
  struct Unlock {
    std::vector<ResidentArray*>& used;
    ~Unlock() {
      for (auto it = used.rbegin(); it != used.rend(); ++it) (*it)->use.Unlock();
    }
  } unlock{used};
  if ((handler_->traits & FARCALL_TRAIT_WRITES_ALL_RESULTS) == 0) {
    FARCALL_RETURN_IF_ERROR(ZeroResults());  // enqueued on the call's stream
  }
  if (handler_->invoke) {
    // In-process (Python) handlers may use any stream of their library's:
    // the inputs (and zeroed results) must be on the device before their
    // code runs.
    FARCALL_RETURN_IF_ERROR(stream_->Synchronize());
  }
  handler_ran_ = true;  // from here its side effects may have happened
  absl::Status s = WithReason(stream_->Invoke(*handler_, inv), ErrorReason::kHandlerError);
  // Even after a failure: nothing of this call may still run once its
  // memory goes back to the pool.
  absl::Status synced = stream_->Synchronize();
  if (s.ok()) s = synced;
  if (s.ok() && shm_on_device()) s = CopyResultsToRegion();
  if (s.ok() && ucx_ && on_device()) s = CopyUcxResultsToHost();
  if (!s.ok() && cancel.deadline_passed()) s = MaxCallTimeExceeded();
  if (!s.ok()) {
    absl::Status health = device_->health();
    if (!health.ok()) agent_.ReportDeviceFailure(health);
  }
  if (s.ok()) SettleResidents();
  run_end_time_ = absl::Now();
  return s;
}

absl::Status AgentCall::CopyUcxResultsToHost() {
  for (size_t o = 0; o < results_.size(); ++o) {
    Tensor& t = results_[o];
    // An aliased result comes back into its arg's host memory: what came in
    // there went on to the device before the handler ran (StageUcxPiece
    // copies each piece out of it), so nothing reads it any more. Others
    // get host memory of their own. Either way the budget counted it
    // (Validate).
    const int64_t alias = validated_->result_alias[o];
    t.host_copy = alias >= 0 && args_[alias].host_copy != nullptr ? args_[alias].host_copy
                                                                  : HostBytes(t.size);
    FARCALL_RETURN_IF_ERROR(stream_->CopyToHost(*t.memory, 0, t.size, t.host_copy.get()));
  }
  return stream_->Synchronize();
}

absl::Status AgentCall::CopyResultsToHost() {
  for (Tensor& t : results_) {
    if (t.host_copy != nullptr || !t.resident.empty()) continue;
    // An aliased result shares its Tensor's memory with the arg, so one copy.
    t.host_copy = HostBytes(t.size);
    FARCALL_RETURN_IF_ERROR(stream_->CopyToHost(*t.memory, 0, t.size, t.host_copy.get()));
  }
  return stream_->Synchronize();
}

absl::StatusOr<bool> AgentCall::NextResponseFrame(int64_t max_chunk_bytes, grpc::ByteBuffer* out) {
  if (header_sent_ && out_index_ > results_.size()) return false;
  FrameEncoder enc;
  if (!header_sent_) {
    v1::ResultHeader h;
    for (const auto& r : header_.results()) *h.add_results() = r;
    for (size_t o = 0; o < results_.size(); ++o) {
      if (!results_[o].resident.empty()) {
        (*h.mutable_residents())[static_cast<uint32_t>(o)] = results_[o].resident;
      }
    }
    h.set_agent_id(agent_.agent_id());
    h.set_platform(std::string(PlatformName(agent_.config.platform)));
    enc.AddMessageField(kHeaderField, h);
    header_sent_ = true;
  }
  int64_t budget = max_chunk_bytes > 0 ? max_chunk_bytes : INT64_MAX;
  // The results are in the client's region, or went over UCX.
  if (shm_ || ucx_) out_index_ = results_.size();
  if (on_device() && out_index_ < results_.size() && device_error_.ok()) {
    if (max_chunk_bytes <= 0) {
      device_error_ = CopyResultsToHost();  // one message: all on the host
    } else {
      // One staged block per frame; the next blocks' copies run while gRPC
      // sends this one.
      if (!outputs_) {
        std::vector<std::pair<DeviceMemory*, int64_t>> ranges;
        for (const Tensor& t : results_) ranges.emplace_back(t.memory.get(), t.sent_size());
        outputs_.emplace(*device_, *stream_, std::move(ranges));
      }
      device_error_ = outputs_->Fill(max_chunk_bytes);
      absl::StatusOr<std::optional<StagedResult>> next = std::optional<StagedResult>();
      if (device_error_.ok()) next = outputs_->Next();
      if (!next.ok()) device_error_ = next.status();
      if (device_error_.ok() && next->has_value()) {
        StagedResult p = std::move(**next);
        std::shared_ptr<StagingBlock> keep(std::move(p.block));
        enc.AddChunk(p.tensor, p.offset, keep->data(), p.size,
                     std::shared_ptr<const void>(keep, keep->data()));
        sent_bytes_ += p.size;
        out_offset_ = p.offset + p.size;
        out_index_ = p.tensor;
        if (out_offset_ == results_[out_index_].sent_size()) {
          ++out_index_;
          out_offset_ = 0;
        }
        // Skip empty results up to the next one with bytes.
        while (out_index_ < results_.size() && results_[out_index_].sent_size() == 0) ++out_index_;
        device_error_ = outputs_->Fill(max_chunk_bytes);
      }
      if (outputs_->done()) out_index_ = results_.size();  // every byte was sent
      if (device_error_.ok()) budget = 0;                  // this frame is full
    }
    if (!device_error_.ok()) {
      absl::Status health = device_->health();
      if (!health.ok()) agent_.ReportDeviceFailure(health);
      return device_error_;
    }
  }
  while (out_index_ < results_.size() && budget > 0) {
    const Tensor& t = results_[out_index_];
    int64_t n = std::min(budget, t.sent_size() - out_offset_);
    if (n > 0) {
      // The frame refers to the result's memory; the keepalive holds it
      // until gRPC has sent it, even if the call is gone by then.
      std::shared_ptr<const void> keep = t.host_copy ? std::shared_ptr<const void>(t.host_copy)
                                                     : std::shared_ptr<const void>(t.memory);
      enc.AddChunk(static_cast<uint32_t>(out_index_), out_offset_, t.host() + out_offset_, n,
                   std::move(keep));
      budget -= n;
      out_offset_ += n;
      sent_bytes_ += n;
    }
    if (out_offset_ == t.sent_size()) {
      ++out_index_;
      out_offset_ = 0;
    }
  }
  if (out_index_ == results_.size()) {
    v1::CallStats stats;
    stats.set_queue_ns(absl::ToInt64Nanoseconds(run_start_time_ - inputs_done_time_));
    stats.set_transfer_ns(absl::ToInt64Nanoseconds(inputs_done_time_ - header_time_));
    stats.set_execute_ns(absl::ToInt64Nanoseconds(run_end_time_ - run_start_time_));
    enc.AddMessageField(kStatsField, stats);
    ++out_index_;  // past the end: nothing more to send
  }
  *out = enc.Finish();
  return true;
}

}  // namespace farcall::agent
