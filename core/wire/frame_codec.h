// Zero-copy framing of ExecuteRequest and ExecuteResponse messages.
//
// Layers:
//   1. On the wire, a frame is exactly the protobuf encoding of
//      ExecuteRequest or ExecuteResponse, so any protobuf client works.
//   2. This codec reads and writes those bytes as raw grpc::ByteBuffers. The
//      small fields (the headers and stats) go through protobuf; chunk data
//      never does. On receive it is copied once, from gRPC's slices into the
//      tensor; on send it goes out as slices that refer to the tensor.
//   3. The agent, router and client use the raw ("generic") gRPC methods and
//      call this codec.
#ifndef FARCALL_CORE_WIRE_FRAME_CODEC_H_
#define FARCALL_CORE_WIRE_FRAME_CODEC_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/wire/header_limits.h"
#include "google/protobuf/message_lite.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"

namespace farcall {

// Field numbers shared by ExecuteRequest and ExecuteResponse.
inline constexpr uint32_t kHeaderField = 1;
inline constexpr uint32_t kChunksField = 2;
inline constexpr uint32_t kStatsField = 3;

// The data of one received chunk, still in gRPC's slices. Valid only during
// the FrameVisitor::OnChunk call that hands it out.
class ChunkBytes {
 public:
  uint64_t size() const { return size_; }
  // Copies all size() bytes to `dst`.
  void CopyTo(uint8_t* dst) const { CopyRangeTo(0, size_, dst); }
  // Copies bytes [from, from + n) of the chunk to `dst`; from + n <= size().
  void CopyRangeTo(uint64_t from, uint64_t n, uint8_t* dst) const;

 private:
  friend class FrameDecoder;
  const std::vector<grpc::Slice>* slices_ = nullptr;
  size_t slice_ = 0;
  size_t offset_ = 0;
  uint64_t size_ = 0;
};

class FrameVisitor {
 public:
  virtual ~FrameVisitor() = default;
  // A message-typed field (header or stats), serialized.
  virtual absl::Status OnMessageField(uint32_t field, absl::string_view bytes) = 0;
  // One Chunk, in wire order.
  virtual absl::Status OnChunk(uint32_t index, uint64_t offset, const ChunkBytes& data) = 0;
};

// Walks one frame, calling `visitor` for each field. Malformed protobuf
// gives INVALID_ARGUMENT; a visitor's error stops the walk and is returned.
absl::Status DecodeFrame(const grpc::ByteBuffer& frame, FrameVisitor& visitor);

// Parses only field `field` (last one wins) into `message`; true if present.
// Chunks are skipped without being read.
// With `header_limits`, a call header (kHeaderField) is checked against them
// before it is parsed (core/wire/header_limits.h).
absl::StatusOr<bool> DecodeMessageField(const grpc::ByteBuffer& frame, uint32_t field,
                                        google::protobuf::MessageLite* message,
                                        const HeaderLimits* header_limits = nullptr);

// Builds one frame. Not thread-safe.
class FrameEncoder {
 public:
  void AddMessageField(uint32_t field, const google::protobuf::MessageLite& m);
  // Adds Chunk{index, offset, data}. Data of a few KiB or more is not
  // copied: the frame refers to it, and `keepalive` is held until gRPC
  // releases the frame. With a null `keepalive` the caller guarantees that
  // the memory outlives the RPC.
  void AddChunk(uint32_t index, uint64_t offset, const uint8_t* data, uint64_t size,
                std::shared_ptr<const void> keepalive);
  // Bytes added so far.
  uint64_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  grpc::ByteBuffer Finish();

 private:
  void Flush();
  std::string pending_;
  std::vector<grpc::Slice> slices_;
  uint64_t size_ = 0;
};

}  // namespace farcall

#endif  // FARCALL_CORE_WIRE_FRAME_CODEC_H_
