// libFuzzer: the zero-copy frame decoder and the call-header path on
// arbitrary request frames (what any gRPC client can send an agent).
#include <cstddef>
#include <cstdint>

#include <algorithm>

#include "core/call_validation.h"
#include "core/wire/frame_codec.h"
#include "core/wire/header_limits.h"
#include "core/wire/proto_convert.h"
#include "farcall/v1/farcall.pb.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"

namespace {

class AcceptAll final : public farcall::FrameVisitor {
 public:
  absl::Status OnMessageField(uint32_t, absl::string_view) override { return absl::OkStatus(); }
  absl::Status OnChunk(uint32_t, uint64_t, const farcall::ChunkBytes& data) override {
    // Touch every byte, as the agent's copy into a tensor does.
    uint8_t sink[64];
    for (uint64_t off = 0; off < data.size(); off += sizeof(sink)) {
      data.CopyRangeTo(off, std::min<uint64_t>(sizeof(sink), data.size() - off), sink);
    }
    return absl::OkStatus();
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Split the input across two slices, as the network may.
  const size_t cut = size / 2;
  grpc::Slice slices[2] = {grpc::Slice(data, cut), grpc::Slice(data + cut, size - cut)};
  grpc::ByteBuffer frame(slices, 2);
  AcceptAll visitor;
  (void)farcall::DecodeFrame(frame, visitor);
  farcall::v1::CallHeader header;
  farcall::HeaderLimits limits;
  absl::StatusOr<bool> found =
      farcall::DecodeMessageField(frame, farcall::kHeaderField, &header, &limits);
  if (found.ok() && *found) {
    (void)farcall::ValidateCall(farcall::DescriptorFromProto(header), int64_t{1} << 30);
  }
  return 0;
}
