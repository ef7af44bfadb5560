#include "absl/strings/string_view.h"
#include "device_agents/agent_call.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/metrics.h"
#include "core/status_macros.h"
#include "core/wire/proto_convert.h"

namespace farcall::agent {
namespace {

// The agent's metrics, declared once here where they are counted.
struct AgentMetrics {
  metrics::CounterFamily calls{"farcall_agent_calls_total",
                               "Calls finished by this agent, by handler and status code.",
                               {"platform", "handler", "code"}};
  metrics::HistogramFamily queue{"farcall_agent_queue_seconds",
                                 "Time from the inputs' arrival until a worker ran the handler.",
                                 {"platform", "handler"}};
  metrics::HistogramFamily transfer{"farcall_agent_transfer_seconds",
                                    "Time from the call header until the last input byte.",
                                    {"platform", "handler"}};
  metrics::HistogramFamily execute{"farcall_agent_execute_seconds",
                                   "Time the handler ran, device synchronisation included.",
                                   {"platform", "handler"}};
  metrics::CounterFamily received{"farcall_agent_received_bytes_total",
                                  "Tensor bytes received in calls.", {"platform"}};
  metrics::CounterFamily sent{"farcall_agent_sent_bytes_total",
                              "Tensor bytes sent back in results.", {"platform"}};
  metrics::GaugeFamily inflight_calls{"farcall_agent_inflight_calls",
                                      "Calls this agent holds now.", {}};
  metrics::GaugeFamily inflight_bytes{"farcall_agent_inflight_bytes",
                                      "Tensor bytes admitted for the calls held now.", {}};
};

AgentMetrics& Metrics() {
  static auto* m = new AgentMetrics;
  return *m;
}

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

}  // namespace

uint8_t* AgentCall::Tensor::host() const {
  if (staging != nullptr) return staging->data();
  return memory->host_ptr();
}

AgentCall::AgentCall(AgentState& agent) : agent_(agent) {
  Metrics().inflight_calls.With({}).Increment();
}

AgentCall::~AgentCall() {
  Metrics().inflight_calls.With({}).Decrement();
  if (admitted_bytes_ > 0) {
    Metrics().inflight_bytes.With({}).Decrement(static_cast<double>(admitted_bytes_));
    // Last: this may resume calls that waited for these bytes.
    agent_.admission->Release(admitted_bytes_);
  }
}

void AgentCall::RecordOutcome(const absl::Status& status) {
  AgentMetrics& m = Metrics();
  const std::string platform(PlatformName(agent_.config.platform));
  // Only registered names become label values, so that callers cannot grow
  // the label set without bound.
  const std::string handler = handler_ != nullptr ? handler_->name : "-";
  m.calls.With({platform, handler, absl::StatusCodeToString(status.code())}).Increment();
  if (assembler_) {
    m.received.With({platform}).Increment(static_cast<double>(assembler_->received_bytes()));
  }
  m.sent.With({platform}).Increment(static_cast<double>(sent_bytes_));
  if (status.ok()) {
    m.queue.With({platform, handler})
        .Observe(absl::ToDoubleSeconds(run_start_time_ - inputs_done_time_));
    m.transfer.With({platform, handler})
        .Observe(absl::ToDoubleSeconds(inputs_done_time_ - header_time_));
    m.execute.With({platform, handler})
        .Observe(absl::ToDoubleSeconds(run_end_time_ - run_start_time_));
  }
}

absl::Status AgentCall::Begin(const grpc::ByteBuffer& first) {
  header_time_ = absl::Now();
  FARCALL_ASSIGN_OR_RETURN(bool found, DecodeMessageField(first, kHeaderField, &header_));
  if (!found) {
    // The router words this the same way (router_service.cc).
    return absl::InvalidArgumentError(
        "the first request message must carry the call header.");
  }
  const AgentConfig& cfg = agent_.config;
  FARCALL_ASSIGN_OR_RETURN(
      ValidatedCall v,
      ValidateCall(DescriptorFromProto(header_), cfg.max_call_bytes, "agent"));
  const absl::string_view served = PlatformName(cfg.platform);
  if (v.platform != cfg.platform) {
    return PlatformNotServedError(served, PlatformName(v.platform));
  }
  handler_ = agent_.registry.Find(header_.handler(), served);
  if (handler_ == nullptr) return HandlerNotFoundError(header_.handler(), served);
  device_ = agent_.backend.devices.front().get();
  // Shared-memory tensors live in the client's region, not in the agent.
  footprint_ = header_.has_shm() ? 0 : v.footprint_bytes;
  if (footprint_ > agent_.admission->budget()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the call needs ", footprint_, " bytes, over the agent's budget of ",
        agent_.admission->budget(),
        " bytes for calls in flight (--max_inflight_bytes); it can never run here."));
  }
  pending_ = std::move(v);
  return absl::OkStatus();
}

void AgentCall::Admitted() {
  admitted_bytes_ = footprint_;
  Metrics().inflight_bytes.With({}).Increment(static_cast<double>(admitted_bytes_));
}

absl::Status AgentCall::Allocate() {
  ValidatedCall v = *std::move(pending_);
  pending_.reset();
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
    if (t.memory->host_ptr() == nullptr) {
      t.staging = std::make_shared<std::vector<uint8_t>>(size);
    }
    return t;
  };
  std::vector<ChunkAssembler::Target> targets;
  for (int i = 0; i < header_.args_size(); ++i) {
    FARCALL_ASSIGN_OR_RETURN(Tensor t, allocate(SpecFromProto(header_.args(i)),
                                                v.arg_bytes[i]));
    targets.push_back({t.spec, t.size, t.host()});
    args_.push_back(std::move(t));
  }
  for (int o = 0; o < header_.results_size(); ++o) {
    if (v.result_alias[o] >= 0) {
      // An aliased result is its input's memory: no second buffer.
      results_.push_back(args_[v.result_alias[o]]);
      continue;
    }
    FARCALL_ASSIGN_OR_RETURN(Tensor t, allocate(SpecFromProto(header_.results(o)),
                                                v.result_bytes[o]));
    results_.push_back(std::move(t));
  }
  assembler_.emplace("args", std::move(targets));
  validated_ = std::move(v);
  return absl::OkStatus();
}

absl::Status AgentCall::OnRequestFrame(const grpc::ByteBuffer& frame) {
  ++frames_;
  return DecodeFrame(frame, *this);
}

absl::Status AgentCall::OnMessageField(uint32_t field, absl::string_view bytes) {
  if (field != kHeaderField) {
    return absl::InvalidArgumentError(
        absl::StrCat("request message ", frames_, " has field ", field,
                     ", which requests do not use."));
  }
  if (frames_ > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "request message ", frames_,
        " carries a call header; only the first message may."));
  }
  return absl::OkStatus();  // the first message's header was read by Begin()
}

absl::Status AgentCall::PlaceInRegion(const ValidatedCall& v) {
  if (agent_.shm == nullptr) {
    return absl::FailedPreconditionError(
        "this agent offers no shared memory; send the tensors as chunks.");
  }
  const v1::ShmTensors& shm = header_.shm();
  if (shm.arg_offsets_size() != header_.args_size() ||
      shm.result_offsets_size() != header_.results_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shm gives ", shm.arg_offsets_size(), " arg and ", shm.result_offsets_size(),
        " result offsets for ", header_.args_size(), " args and ",
        header_.results_size(), " results."));
  }
  auto place = [&](const char* kind, int i, const std::string& token, uint64_t offset,
                   int64_t size, const v1::TensorSpec& spec) -> absl::StatusOr<Tensor> {
    FARCALL_ASSIGN_OR_RETURN(std::shared_ptr<ShmRegion> region,
                             agent_.shm->Find(token.empty() ? shm.region() : token));
    if (offset > region->size() || static_cast<uint64_t>(size) > region->size() - offset) {
      return absl::InvalidArgumentError(absl::StrCat(
          kind, "[", i, "] at [", offset, ", ", offset + size,
          ") lies outside shared-memory region of ", region->size(), " bytes."));
    }
    Tensor t;
    t.spec = SpecFromProto(spec);
    t.size = size;
    t.memory = std::make_shared<RegionView>(region, offset, size);
    return t;
  };
  for (int i = 0; i < header_.args_size(); ++i) {
    const std::string& token = i < shm.arg_regions_size() ? shm.arg_regions(i) : "";
    FARCALL_ASSIGN_OR_RETURN(Tensor t, place("args", i, token, shm.arg_offsets(i),
                                             v.arg_bytes[i], header_.args(i)));
    args_.push_back(std::move(t));
  }
  for (int o = 0; o < header_.results_size(); ++o) {
    if (v.result_alias[o] >= 0) {
      results_.push_back(args_[v.result_alias[o]]);
      continue;
    }
    const std::string& token = o < shm.result_regions_size() ? shm.result_regions(o) : "";
    FARCALL_ASSIGN_OR_RETURN(Tensor t, place("results", o, token, shm.result_offsets(o),
                                             v.result_bytes[o], header_.results(o)));
    results_.push_back(std::move(t));
  }
  shm_ = true;
  return absl::OkStatus();
}

absl::Status AgentCall::OnChunk(uint32_t index, uint64_t offset,
                                const ChunkBytes& data) {
  if (!validated_) {
    return absl::InvalidArgumentError(
        "the first request message must carry the call header.");
  }
  if (shm_) {
    return absl::InvalidArgumentError(
        "a shared-memory call carries no chunks; its tensors are in the region.");
  }
  FARCALL_ASSIGN_OR_RETURN(uint8_t * dst,
                           assembler_->Accept(index, offset, data.size()));
  data.CopyTo(dst);
  return absl::OkStatus();
}

absl::Status AgentCall::EndOfInputs() {
  if (!validated_) {
    return absl::InvalidArgumentError(
        "the call ended before its header was sent.");
  }
  FARCALL_RETURN_IF_ERROR(assembler_->Finish());
  for (Tensor& t : args_) {
    if (t.staging != nullptr) {
      FARCALL_RETURN_IF_ERROR(
          device_->CopyToDevice(t.staging->data(), *t.memory, 0, t.size));
    }
  }
  inputs_done_time_ = absl::Now();
  return absl::OkStatus();
}

absl::Status AgentCall::CheckFitsOneMessage() const {
  if (shm_) return absl::OkStatus();
  int64_t total = 0;
  for (const Tensor& t : results_) total += t.size;
  // Leave room for the header and framing.
  const int64_t limit = agent_.config.max_message_bytes - (64 << 10);
  if (total > limit) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the results need ", total, " bytes, over the ", limit,
        " bytes one Call response can carry; use Execute."));
  }
  return absl::OkStatus();
}

absl::Status AgentCall::Run(const CancellationToken& cancel) {
  run_start_time_ = absl::Now();
  if (cancel.cancelled()) {
    return absl::CancelledError("the call was cancelled before its handler ran.");
  }
  HandlerInvocation inv;
  inv.platform = std::string(PlatformName(agent_.config.platform));
  inv.device_ordinal = device_->ordinal();
  inv.stream_kind = device_->stream_kind();
  inv.stream = device_->stream();
  inv.cancel = &cancel;
  auto buffer = [](const Tensor& t, int64_t alias) {
    FarcallBuffer b{};
    b.struct_size = sizeof(b);
    b.dtype = static_cast<int32_t>(t.spec.dtype);
    b.rank = static_cast<int64_t>(t.spec.dims.size());
    b.dims = t.spec.dims.data();
    b.data = t.memory->device_ptr();
    b.size_bytes = static_cast<uint64_t>(t.size);
    b.aliased_arg = alias;
    return b;
  };
  for (const Tensor& t : args_) inv.args.push_back(buffer(t, -1));
  for (size_t o = 0; o < results_.size(); ++o) {
    inv.results.push_back(buffer(results_[o], validated_->result_alias[o]));
  }
  for (const auto& [name, attr] : header_.attributes()) {
    FarcallAttribute a{};
    a.struct_size = sizeof(a);
    a.name = name.data();
    a.name_size = name.size();
    switch (attr.value_case()) {
      case v1::Attribute::kI64:
        a.type = FARCALL_ATTR_I64;
        a.i64 = attr.i64();
        break;
      case v1::Attribute::kF64:
        a.type = FARCALL_ATTR_F64;
        a.f64 = attr.f64();
        break;
      case v1::Attribute::kB:
        a.type = FARCALL_ATTR_BOOL;
        a.b = attr.b() ? 1 : 0;
        break;
      case v1::Attribute::kStr:
        a.type = FARCALL_ATTR_STR;
        a.str = attr.str().data();
        a.str_size = attr.str().size();
        break;
      case v1::Attribute::VALUE_NOT_SET:
        return absl::InvalidArgumentError(
            absl::StrCat("attribute '", name, "' has no value."));
    }
    inv.attrs.push_back(a);
  }
  absl::Status s = InvokeHandler(handler_->fn, inv);
  if (s.ok()) s = device_->Synchronize();
  for (Tensor& t : results_) {
    if (s.ok() && t.staging != nullptr) {
      s = device_->CopyToHost(*t.memory, 0, t.size, t.staging->data());
    }
  }
  if (s.ok()) s = device_->Synchronize();
  run_end_time_ = absl::Now();
  return s;
}

bool AgentCall::NextResponseFrame(int64_t max_chunk_bytes,
                                  grpc::ByteBuffer* out) {
  if (header_sent_ && out_index_ > results_.size()) return false;
  FrameEncoder enc;
  if (!header_sent_) {
    v1::ResultHeader h;
    for (const auto& r : header_.results()) *h.add_results() = r;
    h.set_agent_id(agent_.agent_id());
    h.set_platform(std::string(PlatformName(agent_.config.platform)));
    enc.AddMessageField(kHeaderField, h);
    header_sent_ = true;
  }
  int64_t budget = max_chunk_bytes > 0 ? max_chunk_bytes : INT64_MAX;
  if (shm_) out_index_ = results_.size();  // the results are in the region
  while (out_index_ < results_.size() && budget > 0) {
    const Tensor& t = results_[out_index_];
    int64_t n = std::min(budget, t.size - out_offset_);
    if (n > 0) {
      // The frame refers to the result's memory; the keepalive holds it
      // until gRPC has sent it, even if the call is gone by then.
      std::shared_ptr<const void> keep =
          t.staging ? std::shared_ptr<const void>(t.staging)
                    : std::shared_ptr<const void>(t.memory);
      enc.AddChunk(static_cast<uint32_t>(out_index_), out_offset_,
                   t.host() + out_offset_, n, std::move(keep));
      budget -= n;
      out_offset_ += n;
      sent_bytes_ += n;
    }
    if (out_offset_ == t.size) {
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
