#include "client/call_codec.h"

#include <sys/random.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>

#include "absl/strings/str_cat.h"
#include "core/resident_handle.h"
#include "core/status_macros.h"
#include "core/wire/proto_convert.h"

namespace farcall::client_internal {
std::string FreshCallId() {
  // From the OS's random source on every call: a generator seeded once
  // (mt19937_64) gives its next ids away to anyone who saw a few hundred,
  // and an id names a caller's kept answer in an agent's ledger.
  uint64_t words[2] = {0, 0};
  auto* bytes = reinterpret_cast<uint8_t*>(words);
  size_t got = 0;
  while (got < sizeof(words)) {
    const ssize_t n = getrandom(bytes + got, sizeof(words) - got, 0);
    if (n > 0) {
      got += static_cast<size_t>(n);
    } else if (errno != EINTR) {
      std::abort();  // no kernel random source: no id can be made safely
    }
  }
  return absl::StrCat(absl::Hex(words[0], absl::kZeroPad16), absl::Hex(words[1], absl::kZeroPad16));
}

CallOptions WithCallId(CallOptions options) {
  if (options.call_id.empty()) options.call_id = FreshCallId();
  return options;
}

namespace {

v1::Attribute ToProto(const AttributeValue& v) {
  v1::Attribute a;
  if (const auto* i = std::get_if<int64_t>(&v)) a.set_i64(*i);
  if (const auto* d = std::get_if<double>(&v)) a.set_f64(*d);
  if (const auto* b = std::get_if<bool>(&v)) a.set_b(*b);
  if (const auto* s = std::get_if<std::string>(&v)) a.set_str(*s);
  return a;
}

}  // namespace

bool NamesResidents(const CallRequest& request) {
  if (!request.keep_results.empty() || !request.release_residents.empty()) return true;
  for (const Arg& a : request.args) {
    if (!a.resident().empty()) return true;
  }
  return false;
}

absl::StatusOr<std::string> ResidentHolderOf(const CallRequest& request) {
  std::vector<std::pair<std::string, std::string>> named;
  for (size_t i = 0; i < request.args.size(); ++i) {
    if (!request.args[i].resident().empty()) {
      named.emplace_back(absl::StrCat("args[", i, "]"), request.args[i].resident());
    }
  }
  for (size_t k = 0; k < request.release_residents.size(); ++k) {
    named.emplace_back(absl::StrCat("release_residents[", k, "]"), request.release_residents[k]);
  }
  return ResidentHolder(named);
}

absl::Status PrepareResidents(const CallRequest& request, const CallOptions& options,
                              PreparedCall& p) {
  v1::CallHeader& h = p.header;
  const size_t n_results = p.validated.result_bytes.size();
  p.result_stays.assign(n_results, false);
  for (size_t i = 0; i < request.args.size(); ++i) {
    const std::string& handle = request.args[i].resident();
    if (handle.empty()) continue;
    (*h.mutable_resident_args())[static_cast<uint32_t>(i)] = handle;
    // On the agent: none of its bytes travel.
    if (i < p.validated.arg_bytes.size()) p.validated.arg_bytes[i] = 0;
    for (size_t o = 0; o < n_results; ++o) {
      if (p.validated.result_alias[o] == static_cast<int64_t>(i)) p.result_stays[o] = true;
    }
  }
  for (uint32_t o : request.keep_results) {
    h.add_keep_results(o);
    if (o < n_results) p.result_stays[o] = true;
  }
  for (size_t k = 0; k < request.release_residents.size(); ++k) {
    h.add_release_residents(request.release_residents[k]);
  }
  if (request.resident_ttl < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("resident_ttl must not be negative (zero: the agent's).");
  }
  // Whole milliseconds, never shorter than asked.
  h.set_resident_ttl_ms(
      absl::ToInt64Milliseconds(absl::Ceil(request.resident_ttl, absl::Milliseconds(1))));
  if (options.validate_locally) {
    absl::StatusOr<std::string> holder = ResidentHolderOf(request);
    if (!holder.ok()) return holder.status();
    p.resident_holder = *std::move(holder);
  }
  // A call that updates a resident in place, or keeps a result, changes
  // the agent's state: sent again (a pure call is, after a broken
  // connection), it would apply twice. It goes as a call with side effects,
  // so that the agent's ledger runs its call_id, which every attempt
  // shares, once.
  bool writes_resident = !request.keep_results.empty();
  for (size_t o = 0; o < n_results; ++o) {
    const int64_t a = p.validated.result_alias[o];
    if (a >= 0 && static_cast<size_t>(a) < request.args.size() &&
        !request.args[a].resident().empty()) {
      writes_resident = true;
    }
  }
  if (writes_resident) h.set_has_side_effect(true);
  p.names_residents = NamesResidents(request);
  p.keeps_results = !request.keep_results.empty();
  return absl::OkStatus();
}

absl::StatusOr<PreparedCall> Prepare(const CallRequest& request, const CallOptions& options) {
  PreparedCall p;
  v1::CallHeader& h = p.header;
  h.set_handler(request.handler);
  CallDescriptor d;
  d.handler = request.handler;
  d.platforms =
      request.platforms.empty() ? std::vector<std::string>{request.platform} : request.platforms;
  for (const std::string& platform : d.platforms) h.add_platforms(platform);
  for (const Arg& a : request.args) {
    *h.add_args() = SpecToProto(a.spec());
    d.args.push_back(a.spec());
  }
  for (const TensorSpec& r : request.results) {
    *h.add_results() = SpecToProto(r);
    d.results.push_back(r);
  }
  for (const auto& [i, o] : request.aliases) (*h.mutable_input_output_aliases())[i] = o;
  d.aliases = request.aliases;
  for (const auto& [name, v] : request.attributes) (*h.mutable_attributes())[name] = ToProto(v);
  h.set_has_side_effect(request.has_side_effect);
  h.set_command_buffer_compatible(request.command_buffer_compatible);
  // A fresh id for each call unless the caller gave one (to reuse on its
  // retries): an agent runs a call with side effects once per id.
  h.set_call_id(options.call_id.empty() ? FreshCallId() : options.call_id);
  // The same validation the servers run, so a bad call fails here with the
  // same code and message, without a round trip.
  absl::StatusOr<ValidatedCall> validated = ValidateCall(d);
  if (!validated.ok() && options.validate_locally) return validated.status();
  if (!validated.ok()) {
    // Sent as it is: the servers give the verdict. Only sizes are needed to
    // cut the args into chunks (a spec without one sends nothing).
    validated.emplace();
    for (const TensorSpec& a : d.args) validated->arg_bytes.push_back(ByteSize(a, "").value_or(0));
    for (const TensorSpec& r : d.results) {
      validated->result_bytes.push_back(ByteSize(r, "").value_or(0));
      validated->result_alias.push_back(-1);
    }
  }
  p.validated = *std::move(validated);
  if (!request.result_memory.empty() && request.result_memory.size() != request.results.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("result_memory has ", request.result_memory.size(), " entries for ",
                     request.results.size(), " results; give one per result, or none."));
  }
  p.result_memory = request.result_memory;
  FARCALL_RETURN_IF_ERROR(PrepareResidents(request, options, p));
  for (const auto& [i, o] : request.aliases) {
    if (i >= request.args.size() || o >= request.results.size()) continue;  // unchecked call
    // A resident is updated on the agent, and a kept result never comes
    // back: neither writes into the caller's memory.
    const bool kept = o < p.result_stays.size() && p.result_stays[o];
    if (request.args[i].writable_data() == nullptr && !kept) {
      return absl::InvalidArgumentError(
          absl::StrCat("args[", i, "] is aliased to results[", o,
                       "] but was passed read-only; pass it with Arg::InOut so that the "
                       "result can be written into it."));
    }
  }
  p.args = request.args;
  p.stage_aliased_args = options.keep_aliased_args;
  return p;
}

absl::Status StageInSharedMemory(PreparedCall& call, ShmChannel& channel) {
  constexpr uint64_t kAlign = 64;
  auto align = [](uint64_t x) { return (x + kAlign - 1) / kAlign * kAlign; };
  const ValidatedCall& v = call.validated;
  const size_t n_args = call.args.size(), n_results = v.result_bytes.size();
  v1::ShmTensors* shm = call.header.mutable_shm();
  // Args already in the caller's shared buffers go by reference; the rest
  // are copied into one staging region, with the non-aliased results.
  std::vector<std::shared_ptr<ShmRegion>> arg_region(n_args);
  std::vector<uint64_t> arg_offset(n_args), result_offset(n_results);
  uint64_t end = 0;
  std::vector<bool> aliased(n_args, false);
  for (int64_t a : v.result_alias) {
    if (a >= 0 && static_cast<size_t>(a) < n_args) aliased[a] = true;
  }
  for (size_t i = 0; i < n_args; ++i) {
    if (!call.args[i].resident().empty()) continue;  // on the agent: no place here
    if (!(call.stage_aliased_args && aliased[i])) {
      arg_region[i] = channel.Locate(call.args[i].data(), v.arg_bytes[i], &arg_offset[i]);
    }
    if (arg_region[i] == nullptr) {
      arg_offset[i] = end;
      end = align(end + v.arg_bytes[i]);
    }
  }
  for (size_t o = 0; o < n_results; ++o) {
    if (v.result_alias[o] < 0 && !call.result_stays[o]) {
      result_offset[o] = end;
      end = align(end + v.result_bytes[o]);
    }
  }
  FARCALL_ASSIGN_OR_RETURN(call.shm_region, channel.Acquire(end));
  shm->set_region(call.shm_region->token);
  for (size_t i = 0; i < n_args; ++i) {
    shm->add_arg_offsets(arg_offset[i]);
    shm->add_arg_regions(arg_region[i] ? arg_region[i]->token : "");
    if (!call.args[i].resident().empty()) continue;
    if (arg_region[i] == nullptr) {
      std::memcpy(call.shm_region->data + arg_offset[i], call.args[i].data(), v.arg_bytes[i]);
    } else {
      call.shm_user_regions.push_back(arg_region[i]);
    }
  }
  for (size_t o = 0; o < n_results; ++o) {
    const int64_t a = v.result_alias[o];
    if (a >= 0) {
      // Written in place where its arg is.
      shm->add_result_offsets(arg_offset[a]);
      shm->add_result_regions(arg_region[a] ? arg_region[a]->token : "");
      ShmRegion* r = arg_region[a] ? arg_region[a].get() : call.shm_region.get();
      call.shm_result_data.push_back(r->data + arg_offset[a]);
      call.shm_result_in_place.push_back(arg_region[a] != nullptr);
    } else {
      shm->add_result_offsets(result_offset[o]);
      shm->add_result_regions("");
      call.shm_result_data.push_back(call.shm_region->data + result_offset[o]);
      call.shm_result_in_place.push_back(false);
    }
  }
  return absl::OkStatus();
}

RequestWriter::RequestWriter(const PreparedCall& call, int64_t chunk_bytes,
                             std::shared_ptr<const void> keepalive)
    : call_(call),
      chunk_bytes_(chunk_bytes > 0 ? chunk_bytes : INT64_MAX),
      keepalive_(std::move(keepalive)) {}

bool RequestWriter::Next(grpc::ByteBuffer* out) {
  const size_t n = call_.args.size();
  if (header_sent_ && index_ >= n) return false;
  FrameEncoder enc;
  if (!header_sent_) {
    enc.AddMessageField(kHeaderField, call_.header);
    header_sent_ = true;
  }
  int64_t budget = chunk_bytes_;
  // The args are in the region, or go over UCX.
  if (call_.shm_region != nullptr || call_.ucx) index_ = n;
  while (index_ < n && budget > 0) {
    const int64_t size = call_.validated.arg_bytes[index_];
    const int64_t take = std::min(budget, size - offset_);
    if (take > 0) {
      // Refers to the caller's memory; the keepalive tells the call when
      // gRPC is done with it.
      enc.AddChunk(static_cast<uint32_t>(index_), offset_, call_.args[index_].data() + offset_,
                   take, keepalive_);
      budget -= take;
      offset_ += take;
    }
    if (offset_ == size) {
      ++index_;
      offset_ = 0;
    }
  }
  *out = enc.Finish();
  return true;
}

ResponseReader::ResponseReader(const PreparedCall& call) : call_(call) {
  std::vector<ChunkAssembler::Target> targets;
  auto stays = [&](int o) {
    return static_cast<size_t>(o) < call.result_stays.size() && call.result_stays[o];
  };
  if (call.shm_region != nullptr) {
    // Same-host: the results are in the region; nothing arrives in chunks.
    for (int o = 0; o < call.header.results_size(); ++o) {
      ResultTensor r;
      r.spec = SpecFromProto(call.header.results(o));
      r.size = call.validated.result_bytes[o];
      if (!stays(o)) {  // one that stays on the agent is named by the header
        r.aliased = call.validated.result_alias[o] >= 0;
        r.data = call.shm_result_data[o];
        r.keepalive = call.shm_region;
      }
      result_.results.push_back(std::move(r));
    }
    assembler_.emplace("results", std::move(targets));
    return;
  }
  for (int o = 0; o < call.header.results_size(); ++o) {
    ResultTensor r;
    r.spec = SpecFromProto(call.header.results(o));
    r.size = call.validated.result_bytes[o];
    const int64_t alias = call.validated.result_alias[o];
    if (stays(o)) {
      // On the agent: no bytes come; the header names it.
      targets.push_back({r.spec, 0, nullptr});
      result_.results.push_back(std::move(r));
      continue;
    }
    if (alias >= 0) {
      r.aliased = true;
      r.data = call.args[alias].writable_data();
    } else if (o < static_cast<int>(call.result_memory.size()) &&
               call.result_memory[o] != nullptr) {
      r.data = static_cast<uint8_t*>(call.result_memory[o]);
    } else {
      // Not zero-filled: every byte is written by a chunk.
      r.storage.reset(new (std::nothrow) uint8_t[r.size > 0 ? r.size : 1]);
      if (r.storage == nullptr && init_status_.ok()) {
        init_status_ = absl::ResourceExhaustedError(
            absl::StrCat("cannot allocate ", r.size, " bytes on the client for results[", o, "]."));
      }
      r.data = r.storage.get();
    }
    targets.push_back({r.spec, r.size, r.data});
    result_.results.push_back(std::move(r));
  }
  if (call.ucx) targets.clear();  // the results arrive over UCX, not in chunks
  assembler_.emplace("results", std::move(targets));
  landed_.assign(result_.results.size(), 0);
}

std::optional<LandedResult> ResponseReader::Landed(bool handler_may_have_run) const {
  for (size_t o = 0; o < result_.results.size(); ++o) {
    const int64_t arg = call_.validated.result_alias[o];
    if (arg < 0 || result_.results[o].resident.has_value() ||
        (o < call_.result_stays.size() && call_.result_stays[o])) {
      continue;  // never lands here: it stays on the agent
    }
    const int64_t size = result_.results[o].size;
    bool in_place = call_.ucx;
    if (call_.shm_region != nullptr) {
      // Staged results reach the caller's memory only once the call is OK.
      in_place = o < call_.shm_result_in_place.size() && call_.shm_result_in_place[o];
    }
    if (in_place) {
      if (handler_may_have_run && size > 0) {
        return LandedResult{arg, static_cast<int64_t>(o), /*bytes=*/-1, size};
      }
      continue;
    }
    if (o < landed_.size() && landed_[o] > 0) {
      return LandedResult{arg, static_cast<int64_t>(o), landed_[o], size};
    }
  }
  return std::nullopt;
}

std::vector<uint8_t*> ResponseReader::result_data() const {
  std::vector<uint8_t*> out;
  for (const ResultTensor& r : result_.results) out.push_back(r.data);
  return out;
}

absl::Status ResponseReader::OnFrame(const grpc::ByteBuffer& frame) {
  return DecodeFrame(frame, *this);
}

absl::Status ResponseReader::OnMessageField(uint32_t field, absl::string_view bytes) {
  if (field == kHeaderField) {
    v1::ResultHeader h;
    if (!h.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
      return absl::InternalError("the result header does not parse.");
    }
    if (static_cast<size_t>(h.results_size()) != result_.results.size()) {
      return absl::InternalError(absl::StrCat("the agent answered with ", h.results_size(),
                                              " results; the call asked for ",
                                              result_.results.size(), "."));
    }
    result_.agent_id = h.agent_id();
    result_.platform = h.platform();
    for (size_t o = 0; o < result_.results.size(); ++o) {
      const bool stays = o < call_.result_stays.size() && call_.result_stays[o];
      auto it = h.residents().find(static_cast<uint32_t>(o));
      if (stays != (it != h.residents().end())) {
        return absl::InternalError(absl::StrCat(
            "the agent answered results[", o, "] ", stays ? "with bytes" : "as a resident",
            "; the call asked for it ", stays ? "to stay on the agent" : "back", "."));
      }
      if (stays)
        result_.results[o].resident = Resident{it->second, result_.results[o].spec, h.platform()};
    }
    header_seen_ = true;
  } else if (field == kStatsField) {
    v1::CallStats s;
    if (s.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
      result_.queue_time = absl::Nanoseconds(s.queue_ns());
      result_.transfer_time = absl::Nanoseconds(s.transfer_ns());
      result_.execute_time = absl::Nanoseconds(s.execute_ns());
    }
  }
  return absl::OkStatus();
}

absl::Status ResponseReader::OnChunk(uint32_t index, uint64_t offset, const ChunkBytes& data) {
  absl::StatusOr<uint8_t*> dst = assembler_->Accept(index, offset, data.size());
  // A malformed answer is the server's fault, not the caller's.
  if (!dst.ok()) return absl::InternalError(dst.status().message());
  data.CopyTo(*dst);
  if (index < landed_.size()) landed_[index] += static_cast<int64_t>(data.size());
  return absl::OkStatus();
}

absl::StatusOr<CallResult> ResponseReader::Finish() {
  if (!header_seen_) return absl::InternalError("the answer had no result header.");
  absl::Status s = assembler_->Finish();
  if (!s.ok()) return absl::InternalError(s.message());
  if (call_.shm_region != nullptr) {
    // Where each result goes: every allocation first, so that a call that
    // cannot allocate fails before any byte reached the caller's memory.
    std::vector<uint8_t*> dst(result_.results.size(), nullptr);
    for (size_t o = 0; o < result_.results.size(); ++o) {
      ResultTensor& r = result_.results[o];
      if (r.resident.has_value()) continue;  // stayed on the agent
      if (r.aliased) {
        dst[o] = call_.args[call_.validated.result_alias[o]].writable_data();
      } else if (o < call_.result_memory.size() && call_.result_memory[o] != nullptr) {
        dst[o] = static_cast<uint8_t*>(call_.result_memory[o]);
      } else if (static_cast<uint64_t>(r.size) >= call_.shm_region->size / 4) {
        continue;  // a large part of the region: read where it lies, holding it
      } else {
        // A small part of the region: a copy of its own, so that keeping the
        // result does not keep the whole region (and its args) from reuse.
        r.storage.reset(new (std::nothrow) uint8_t[r.size > 0 ? r.size : 1]);
        if (r.storage == nullptr) {
          return absl::ResourceExhaustedError(absl::StrCat(
              "cannot allocate ", r.size, " bytes on the client for results[", o, "]."));
        }
        dst[o] = r.storage.get();
      }
    }
    for (size_t o = 0; o < result_.results.size(); ++o) {
      ResultTensor& r = result_.results[o];
      if (dst[o] == nullptr) continue;
      // Updated in place in a staging region: hand it back to the caller's
      // memory. In the caller's own shared buffer it is there already.
      if (!call_.shm_result_in_place[o]) std::memcpy(dst[o], r.data, r.size);
      r.data = dst[o];
      r.keepalive.reset();
    }
    result_.transport = Transport::kShm;
  }
  return std::move(result_);
}

}  // namespace farcall::client_internal
