#include "core/wire/frame_codec.h"
#include "absl/strings/string_view.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace farcall {
namespace {

// Below this, chunk data is copied into the frame: a slice of its own would
// cost more than the copy.
constexpr uint64_t kCopyBelow = 4096;

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLen = 2, kFixed32 = 5 };

absl::Status Malformed(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("malformed farcall frame: ", what, "."));
}

// As protobuf's parser: field 0 is invalid, and a tag fits in 32 bits.
bool ValidTag(uint64_t tag) { return (tag >> 3) != 0 && tag <= UINT32_MAX; }

void PutVarint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

int VarintSize(uint64_t v) {
  int n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

using Keepalive = std::shared_ptr<const void>;
void ReleaseKeepalive(void* k) { delete static_cast<Keepalive*>(k); }

void PutTag(std::string* out, uint32_t field, WireType type) {
  PutVarint(out, (static_cast<uint64_t>(field) << 3) | type);
}

}  // namespace

// Reads protobuf wire format across gRPC's slices.
class FrameDecoder {
 public:
  explicit FrameDecoder(const grpc::ByteBuffer& frame) {
    // Dump takes references to the slices; no bytes are copied.
    (void)frame.Dump(&slices_);
    for (const grpc::Slice& s : slices_) remaining_ += s.size();
  }

  uint64_t remaining() const { return remaining_; }

  bool ReadByte(uint8_t* b) {
    while (slice_ < slices_.size() && offset_ == slices_[slice_].size()) {
      ++slice_;
      offset_ = 0;
    }
    if (slice_ == slices_.size()) return false;
    *b = slices_[slice_].begin()[offset_++];
    --remaining_;
    return true;
  }

  bool ReadVarint(uint64_t* v) {
    uint64_t result = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      uint8_t b;
      if (!ReadByte(&b)) return false;
      result |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) {
        *v = result;
        return true;
      }
    }
    return false;
  }

  bool Skip(uint64_t n) {
    if (n > remaining_) return false;
    remaining_ -= n;
    while (n > 0) {
      size_t avail = slices_[slice_].size() - offset_;
      if (avail == 0) {
        ++slice_;
        offset_ = 0;
        continue;
      }
      size_t step = n < avail ? n : avail;
      offset_ += step;
      n -= step;
    }
    return true;
  }

  bool ReadString(uint64_t n, std::string* out) {
    if (n > remaining_) return false;
    ChunkBytes at = Here(n);
    out->resize(n);
    at.CopyTo(reinterpret_cast<uint8_t*>(out->data()));
    return Skip(n);
  }

  // A view of the next `n` bytes, without moving.
  ChunkBytes Here(uint64_t n) const {
    ChunkBytes c;
    c.slices_ = &slices_;
    c.slice_ = slice_;
    c.offset_ = offset_;
    c.size_ = n;
    return c;
  }

  bool SkipField(WireType type) {
    uint64_t n;
    switch (type) {
      case kVarint:
        return ReadVarint(&n);
      case kFixed64:
        return Skip(8);
      case kFixed32:
        return Skip(4);
      case kLen:
        return ReadVarint(&n) && Skip(n);
    }
    return false;
  }

  absl::Status ReadChunk(FrameVisitor& visitor) {
    uint64_t len;
    if (!ReadVarint(&len) || len > remaining_) return Malformed("truncated chunk");
    const uint64_t end = remaining_ - len;
    uint64_t index = 0, offset = 0;
    ChunkBytes data;  // empty unless the chunk has data
    while (remaining_ > end) {
      uint64_t tag;
      if (!ReadVarint(&tag)) return Malformed("truncated chunk field");
      if (!ValidTag(tag)) return Malformed("bad tag in chunk");
      const uint32_t field = static_cast<uint32_t>(tag >> 3);
      const WireType type = static_cast<WireType>(tag & 7);
      if (field == 1 && type == kVarint) {
        if (!ReadVarint(&index)) return Malformed("bad chunk index");
      } else if (field == 2 && type == kVarint) {
        if (!ReadVarint(&offset)) return Malformed("bad chunk offset");
      } else if (field == 3 && type == kLen) {
        uint64_t n;
        if (!ReadVarint(&n) || n > remaining_ - end) {
          return Malformed("chunk data runs past its chunk");
        }
        // Fields may come in any order, so remember where the data is and
        // hand it out once index and offset are known.
        data = Here(n);
        Skip(n);
      } else if (!SkipField(type)) {
        return Malformed("bad field in chunk");
      }
    }
    if (remaining_ != end) return Malformed("chunk length mismatch");
    if (index > UINT32_MAX) return Malformed("chunk index over 32 bits");
    return visitor.OnChunk(static_cast<uint32_t>(index), offset, data);
  }

  // Walks the top-level fields. With `only_field` set, other message fields
  // and all chunks are skipped.
  absl::Status Walk(FrameVisitor* visitor, uint32_t only_field, std::string* only_bytes,
                    bool* found) {
    while (remaining_ > 0) {
      uint64_t tag;
      if (!ReadVarint(&tag)) return Malformed("truncated tag");
      if (!ValidTag(tag)) return Malformed("bad tag");
      const uint32_t field = static_cast<uint32_t>(tag >> 3);
      const WireType type = static_cast<WireType>(tag & 7);
      if (visitor != nullptr && field == kChunksField && type == kLen) {
        absl::Status s = ReadChunk(*visitor);
        if (!s.ok()) return s;
      } else if ((field == kHeaderField || field == kStatsField) && type == kLen &&
                 (visitor != nullptr || field == only_field)) {
        uint64_t n;
        std::string bytes;
        if (!ReadVarint(&n) || !ReadString(n, &bytes)) {
          return Malformed("truncated message field");
        }
        if (visitor != nullptr) {
          absl::Status s = visitor->OnMessageField(field, bytes);
          if (!s.ok()) return s;
        } else {
          *only_bytes = std::move(bytes);
          *found = true;
        }
      } else if (!SkipField(type)) {
        return Malformed("bad field");
      }
    }
    return absl::OkStatus();
  }

 private:
  std::vector<grpc::Slice> slices_;
  size_t slice_ = 0;
  size_t offset_ = 0;
  uint64_t remaining_ = 0;
};

void ChunkBytes::CopyRangeTo(uint64_t from, uint64_t n, uint8_t* dst) const {
  size_t s = slice_;
  size_t off = offset_;
  // Skip to `from`.
  while (from > 0) {
    size_t avail = (*slices_)[s].size() - off;
    if (from < avail) {
      off += from;
      break;
    }
    from -= avail;
    ++s;
    off = 0;
  }
  while (n > 0) {
    const grpc::Slice& slice = (*slices_)[s];
    size_t avail = slice.size() - off;
    size_t step = n < avail ? n : avail;
    std::memcpy(dst, slice.begin() + off, step);
    dst += step;
    n -= step;
    ++s;
    off = 0;
  }
}

absl::Status DecodeFrame(const grpc::ByteBuffer& frame, FrameVisitor& visitor) {
  FrameDecoder d(frame);
  return d.Walk(&visitor, 0, nullptr, nullptr);
}

absl::StatusOr<bool> DecodeMessageField(const grpc::ByteBuffer& frame, uint32_t field,
                                        google::protobuf::MessageLite* message,
                                        const HeaderLimits* header_limits) {
  FrameDecoder d(frame);
  std::string bytes;
  bool found = false;
  absl::Status s = d.Walk(nullptr, field, &bytes, &found);
  if (!s.ok()) return s;
  if (!found) return false;
  if (header_limits != nullptr && field == kHeaderField) {
    s = CheckHeaderLimits(bytes, *header_limits);
    if (!s.ok()) return s;
  }
  if (!message->ParseFromString(bytes)) {
    // The agent's own decoder words it the same way (agent_call.cc).
    if (field == kHeaderField) {
      return absl::InvalidArgumentError("the call header does not parse.");
    }
    return Malformed(absl::StrCat("field ", field, " does not parse"));
  }
  return true;
}

void FrameEncoder::AddMessageField(uint32_t field, const google::protobuf::MessageLite& m) {
  std::string bytes = m.SerializeAsString();
  const size_t before = pending_.size();
  PutTag(&pending_, field, kLen);
  PutVarint(&pending_, bytes.size());
  pending_ += bytes;
  size_ += pending_.size() - before;
}

void FrameEncoder::AddChunk(uint32_t index, uint64_t offset, const uint8_t* data, uint64_t size,
                            std::shared_ptr<const void> keepalive) {
  uint64_t inner = 0;
  if (index != 0) inner += 1 + VarintSize(index);
  if (offset != 0) inner += 1 + VarintSize(offset);
  if (size != 0) inner += 1 + VarintSize(size) + size;
  const size_t before = pending_.size();
  PutTag(&pending_, kChunksField, kLen);
  PutVarint(&pending_, inner);
  if (index != 0) {
    PutTag(&pending_, 1, kVarint);
    PutVarint(&pending_, index);
  }
  if (offset != 0) {
    PutTag(&pending_, 2, kVarint);
    PutVarint(&pending_, offset);
  }
  if (size == 0) {
    size_ += pending_.size() - before;
    return;
  }
  PutTag(&pending_, 3, kLen);
  PutVarint(&pending_, size);
  size_ += pending_.size() - before + size;
  if (size < kCopyBelow) {
    pending_.append(reinterpret_cast<const char*>(data), size);
    return;
  }
  Flush();
  void* bytes = const_cast<uint8_t*>(data);
  if (keepalive == nullptr) {
    slices_.emplace_back(bytes, size, grpc::Slice::STATIC_SLICE);
  } else {
    slices_.push_back(
        grpc::Slice(bytes, size, &ReleaseKeepalive, new Keepalive(std::move(keepalive))));
  }
}

void FrameEncoder::Flush() {
  if (pending_.empty()) return;
  slices_.emplace_back(pending_.data(), pending_.size());  // copies
  pending_.clear();
}

grpc::ByteBuffer FrameEncoder::Finish() {
  Flush();
  grpc::ByteBuffer bb(slices_.data(), slices_.size());
  slices_.clear();
  size_ = 0;
  return bb;
}

}  // namespace farcall
