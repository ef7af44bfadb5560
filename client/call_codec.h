// The client's half of the frame protocol: cutting the caller's args into
// request frames, and assembling response frames into results.
// Internal to client/.
#ifndef FARCALL_CLIENT_CALL_CODEC_H_
#define FARCALL_CLIENT_CALL_CODEC_H_

#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "client/shm_channel.h"
#include "core/call_validation.h"
#include "core/chunk_assembler.h"
#include "core/retry_policy.h"
#include "core/wire/frame_codec.h"
#include "farcall/client.h"
#include "farcall/v1/farcall.pb.h"

namespace farcall::client_internal {

// Validates a request locally (the same checks and messages as the servers)
// and prepares its header.
struct PreparedCall {
  v1::CallHeader header;
  ValidatedCall validated;
  std::vector<Arg> args;
  std::vector<void*> result_memory;  // CallRequest::result_memory
  // Set for same-host calls: the region the tensors are staged in, where
  // each result lands, and the caller's own regions the call uses.
  std::shared_ptr<ShmRegion> shm_region;
  std::vector<uint8_t*> shm_result_data;
  std::vector<bool> shm_result_in_place;  // aliased into caller memory already
  std::vector<std::shared_ptr<ShmRegion>> shm_user_regions;
  // CallOptions::keep_aliased_args: an aliased arg in the caller's shared
  // buffers is staged, not used in place, so that a handler still running
  // after the call failed cannot write over the arg once it is restored.
  bool stage_aliased_args = false;
  // Resident arrays: whether the call names any (it then goes over gRPC, to
  // their holder), the agent that holds them ("" unknown or none), and which
  // results stay on the agent (kept, or aliased to a resident arg).
  bool names_residents = false;
  bool keeps_results = false;  // some results stay as new residents: not over shm
  std::string resident_holder;
  std::vector<bool> result_stays;
  bool ucx = false;         // the tensors go over UCX (client/ucx_exchange.h)
  bool via_router = false;  // the target is a router
  // The target is an agent the lookaside chose: a failure that never reached
  // it is marked (MarkNotDelivered), so that the call may go elsewhere.
  bool direct = false;
};
absl::StatusOr<PreparedCall> Prepare(const CallRequest& request, const CallOptions& options);
// Whether a call names resident arrays in any way (args, kept results,
// releases).
bool NamesResidents(const CallRequest& request);
// The agent that holds every resident the call names ("" for none), or
// INVALID_ARGUMENT naming both when they are on two (core/resident_handle.h).
absl::StatusOr<std::string> ResidentHolderOf(const CallRequest& request);

// 128 random bits in hex, from the OS's random source (getrandom).
std::string FreshCallId();
// `options` with a call_id: its own, or a fresh one. A logical call takes
// one at its start, and every attempt of it (UCX, then gRPC; an agent, then
// the next one or the router) carries that same id, so that an agent's
// ledger runs a call with side effects once however often it is sent.
CallOptions WithCallId(CallOptions options);

// Stages a prepared call in shared memory: copies its args into a region
// from `channel` and names the region and offsets in the header. After
// this, the request carries no chunks and the answer none either.
absl::Status StageInSharedMemory(PreparedCall& call, ShmChannel& channel);

// Hands a call's outcome to its callback only once gRPC has let go of every
// request slice that refers to the caller's memory (the slices hold a
// reference to this), so that the caller may free that memory as soon as it
// hears back, even after a cancel or a deadline.
class Completion {
 public:
  explicit Completion(CallCallback done) : done_(std::move(done)) {}
  ~Completion() { done_(std::move(result_)); }
  void Set(absl::StatusOr<CallResult> r) { result_ = std::move(r); }

 private:
  CallCallback done_;
  absl::StatusOr<CallResult> result_ = absl::InternalError("the call ended with no result.");
};

// Produces request frames of at most `chunk_bytes` of data each; the first
// carries the header. The frames refer to the caller's memory.
class RequestWriter {
 public:
  // `keepalive` is held by every frame slice that refers to the caller's
  // memory.
  RequestWriter(const PreparedCall& call, int64_t chunk_bytes,
                std::shared_ptr<const void> keepalive);
  // False when everything was written (an empty call still gets one frame).
  bool Next(grpc::ByteBuffer* out);

 private:
  const PreparedCall& call_;
  int64_t chunk_bytes_;
  std::shared_ptr<const void> keepalive_;
  bool header_sent_ = false;
  size_t index_ = 0;
  int64_t offset_ = 0;
};

// Assembles response frames into a CallResult, writing aliased results into
// the caller's InOut memory.
class ResponseReader final : private FrameVisitor {
 public:
  explicit ResponseReader(const PreparedCall& call);
  // Not OK when the results' memory could not be allocated; check before
  // sending the call.
  const absl::Status& init_status() const { return init_status_; }
  // Where each result is to be written (a UCX call's receives go there).
  std::vector<uint8_t*> result_data() const;
  absl::Status OnFrame(const grpc::ByteBuffer& frame);
  // After the RPC succeeded: checks completeness and hands the result over.
  absl::StatusOr<CallResult> Finish();
  // After the call failed: the first result aliased to an arg that has
  // begun to land in the arg's memory (retry_policy.h), if any. Chunks are
  // counted as they land; a result the agent writes in place (in the
  // caller's own shared buffer) or that comes over UCX counts as landed,
  // its bytes unknown, whenever `handler_may_have_run`.
  std::optional<LandedResult> Landed(bool handler_may_have_run) const;

 private:
  absl::Status OnMessageField(uint32_t field, absl::string_view bytes) override;
  absl::Status OnChunk(uint32_t index, uint64_t offset, const ChunkBytes& data) override;

  const PreparedCall& call_;
  absl::Status init_status_;
  CallResult result_;
  std::optional<ChunkAssembler> assembler_;
  std::vector<int64_t> landed_;  // bytes of each result written so far
  bool header_seen_ = false;
};

}  // namespace farcall::client_internal

#endif  // FARCALL_CLIENT_CALL_CODEC_H_
