#include "core/wire/frame_codec.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "farcall/v1/farcall.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "gtest/gtest.h"

namespace farcall {
namespace {

using ::testing::HasSubstr;
namespace pb = ::farcall::v1;

// ---- Helpers ----

// Hand-encoding of protobuf wire format.
std::string Varint(uint64_t v) {
  std::string out;
  while (v >= 0x80) {
    out.push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
  return out;
}
std::string Tag(uint32_t field, uint32_t type) {
  return Varint((static_cast<uint64_t>(field) << 3) | type);
}
std::string VarintField(uint32_t field, uint64_t v) { return Tag(field, 0) + Varint(v); }
std::string LenField(uint32_t field, const std::string& bytes) {
  return Tag(field, 2) + Varint(bytes.size()) + bytes;
}

std::string Pattern(size_t n, uint32_t seed) {
  std::string s(n, '\0');
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    s[i] = static_cast<char>(x >> 24);
  }
  return s;
}

grpc::ByteBuffer OneSlice(const std::string& bytes) {
  grpc::Slice s(bytes);
  return grpc::ByteBuffer(&s, 1);
}

// Slices of `bytes` cut at `cuts` (sorted, each in [0, size]); empty pieces
// are kept.
grpc::ByteBuffer Split(const std::string& bytes, const std::vector<size_t>& cuts) {
  std::vector<grpc::Slice> slices;
  size_t prev = 0;
  for (size_t c : cuts) {
    slices.emplace_back(bytes.data() + prev, c - prev);
    prev = c;
  }
  slices.emplace_back(bytes.data() + prev, bytes.size() - prev);
  return grpc::ByteBuffer(slices.data(), slices.size());
}

std::string Flatten(const grpc::ByteBuffer& bb) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(bb.Dump(&slices).ok());
  std::string out;
  for (const grpc::Slice& s : slices) {
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return out;
}

struct SeenChunk {
  uint32_t index;
  uint64_t offset;
  std::string data;
};

class Recorder : public FrameVisitor {
 public:
  absl::Status OnMessageField(uint32_t field, absl::string_view bytes) override {
    fields.emplace_back(field, std::string(bytes));
    return absl::OkStatus();
  }
  absl::Status OnChunk(uint32_t index, uint64_t offset, const ChunkBytes& data) override {
    SeenChunk c{index, offset, std::string(data.size(), '\0')};
    data.CopyTo(reinterpret_cast<uint8_t*>(c.data.data()));
    chunks.push_back(std::move(c));
    return absl::OkStatus();
  }
  std::vector<std::pair<uint32_t, std::string>> fields;
  std::vector<SeenChunk> chunks;
};

pb::CallHeader SampleHeader() {
  pb::CallHeader h;
  h.set_handler("axpy");
  h.add_platforms("cuda");
  for (int i = 0; i < 2; ++i) {
    pb::TensorSpec* a = h.add_args();
    a->set_dtype(pb::F32);
    a->add_dims(4);
    a->add_dims(8);
  }
  pb::TensorSpec* r = h.add_results();
  r->set_dtype(pb::F32);
  r->add_dims(4);
  r->add_dims(8);
  (*h.mutable_input_output_aliases())[1] = 0;
  (*h.mutable_attributes())["alpha"].set_f64(2.5);
  h.set_call_id("call-123");
  return h;
}

// ---- FrameEncoder output is protobuf ----

TEST(FrameEncoderTest, RequestParsesAsExecuteRequest) {
  const pb::CallHeader header = SampleHeader();
  const std::string small = Pattern(100, 1);
  const std::string large = Pattern(10000, 2);
  FrameEncoder enc;
  EXPECT_TRUE(enc.empty());
  enc.AddMessageField(kHeaderField, header);
  enc.AddChunk(0, 0, reinterpret_cast<const uint8_t*>(small.data()), small.size(), nullptr);
  enc.AddChunk(1, 0, reinterpret_cast<const uint8_t*>(large.data()), large.size(), nullptr);
  enc.AddChunk(1, 10000, nullptr, 0, nullptr);  // empty
  enc.AddChunk(7, (uint64_t{1} << 40) + 3, reinterpret_cast<const uint8_t*>(small.data()), 5,
               nullptr);
  const uint64_t size = enc.size();
  EXPECT_FALSE(enc.empty());
  grpc::ByteBuffer bb = enc.Finish();
  EXPECT_EQ(bb.Length(), size);
  EXPECT_TRUE(enc.empty());

  const std::string wire = Flatten(bb);
  pb::ExecuteRequest req;
  ASSERT_TRUE(req.ParseFromString(wire));
  ASSERT_TRUE(req.has_header());
  EXPECT_EQ(req.header().SerializeAsString(), header.SerializeAsString());
  EXPECT_EQ(req.header().handler(), "axpy");
  EXPECT_EQ(req.header().input_output_aliases().at(1), 0u);
  ASSERT_EQ(req.chunks_size(), 4);
  EXPECT_EQ(req.chunks(0).index(), 0u);
  EXPECT_EQ(req.chunks(0).offset(), 0u);
  EXPECT_EQ(req.chunks(0).data(), small);
  EXPECT_EQ(req.chunks(1).index(), 1u);
  EXPECT_EQ(req.chunks(1).offset(), 0u);
  EXPECT_EQ(req.chunks(1).data(), large);
  EXPECT_EQ(req.chunks(2).index(), 1u);
  EXPECT_EQ(req.chunks(2).offset(), 10000u);
  EXPECT_EQ(req.chunks(2).data(), "");
  EXPECT_EQ(req.chunks(3).index(), 7u);
  EXPECT_EQ(req.chunks(3).offset(), (uint64_t{1} << 40) + 3);
  EXPECT_EQ(req.chunks(3).data(), small.substr(0, 5));
}

TEST(FrameEncoderTest, SameBytesAsProtobufSerialization) {
  // Without maps, protobuf's serialization is canonical; the encoder's must
  // be byte-identical.
  pb::ExecuteResponse want;
  want.mutable_header()->set_agent_id("agent-1");
  want.mutable_header()->set_platform("cpu");
  pb::TensorSpec* r = want.mutable_header()->add_results();
  r->set_dtype(pb::BF16);
  r->add_dims(3);
  const std::string d0 = Pattern(5000, 3), d1 = Pattern(17, 4);
  pb::Chunk* c = want.add_chunks();
  c->set_index(0);
  c->set_offset(0);
  c->set_data(d0);
  c = want.add_chunks();
  c->set_index(2);
  c->set_offset(300);
  c->set_data(d1);
  want.add_chunks()->set_index(3);  // no data
  want.mutable_stats()->set_queue_ns(1);
  want.mutable_stats()->set_transfer_ns(22222);
  want.mutable_stats()->set_execute_ns(333333333);

  FrameEncoder enc;
  enc.AddMessageField(kHeaderField, want.header());
  enc.AddChunk(0, 0, reinterpret_cast<const uint8_t*>(d0.data()), d0.size(), nullptr);
  enc.AddChunk(2, 300, reinterpret_cast<const uint8_t*>(d1.data()), d1.size(), nullptr);
  enc.AddChunk(3, 0, nullptr, 0, nullptr);
  enc.AddMessageField(kStatsField, want.stats());
  const std::string wire = Flatten(enc.Finish());
  EXPECT_EQ(wire, want.SerializeAsString());

  pb::ExecuteResponse got;
  ASSERT_TRUE(got.ParseFromString(wire));
  EXPECT_EQ(got.stats().execute_ns(), 333333333);
  EXPECT_EQ(got.chunks(0).data(), d0);
}

TEST(FrameEncoderTest, EmptyFrame) {
  FrameEncoder enc;
  grpc::ByteBuffer bb = enc.Finish();
  EXPECT_EQ(bb.Length(), 0u);
  Recorder r;
  EXPECT_TRUE(DecodeFrame(bb, r).ok());
  EXPECT_TRUE(r.fields.empty());
  EXPECT_TRUE(r.chunks.empty());
}

TEST(FrameEncoderTest, EncoderIsReusableAfterFinish) {
  FrameEncoder enc;
  const std::string a = Pattern(8000, 5);
  enc.AddChunk(1, 2, reinterpret_cast<const uint8_t*>(a.data()), a.size(), nullptr);
  grpc::ByteBuffer first = enc.Finish();
  enc.AddChunk(4, 0, reinterpret_cast<const uint8_t*>(a.data()), 3, nullptr);
  grpc::ByteBuffer second = enc.Finish();
  pb::ExecuteRequest r1, r2;
  ASSERT_TRUE(r1.ParseFromString(Flatten(first)));
  ASSERT_TRUE(r2.ParseFromString(Flatten(second)));
  ASSERT_EQ(r1.chunks_size(), 1);
  ASSERT_EQ(r2.chunks_size(), 1);
  EXPECT_EQ(r1.chunks(0).data(), a);
  EXPECT_EQ(r2.chunks(0).index(), 4u);
  EXPECT_EQ(r2.chunks(0).data(), a.substr(0, 3));
}

// ---- Zero copy and keepalive ----

// A buffer of `n` bytes whose shared_ptr sets *released when freed.
std::shared_ptr<std::vector<uint8_t>> MakeOwned(size_t n, bool* released) {
  *released = false;
  auto* v = new std::vector<uint8_t>(n);
  for (size_t i = 0; i < n; ++i) (*v)[i] = static_cast<uint8_t>(i * 7 + 1);
  return std::shared_ptr<std::vector<uint8_t>>(v, [released](std::vector<uint8_t>* p) {
    *released = true;
    delete p;
  });
}

bool AnySliceStartsAt(const grpc::ByteBuffer& bb, const uint8_t* p) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(bb.Dump(&slices).ok());
  for (const grpc::Slice& s : slices) {
    if (s.begin() == p) return true;
  }
  return false;
}

bool AnySliceInside(const grpc::ByteBuffer& bb, const uint8_t* p, size_t n) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(bb.Dump(&slices).ok());
  for (const grpc::Slice& s : slices) {
    if (s.begin() >= p && s.begin() < p + n) return true;
  }
  return false;
}

TEST(FrameEncoderTest, LargeChunkIsReferencedAndKeepaliveHeldUntilBufferDies) {
  bool released = false;
  std::shared_ptr<std::vector<uint8_t>> owned = MakeOwned(4096, &released);
  const uint8_t* data = owned->data();
  std::optional<grpc::ByteBuffer> bb;
  {
    FrameEncoder enc;
    enc.AddMessageField(kHeaderField, SampleHeader());
    enc.AddChunk(0, 0, data, owned->size(), owned);
    bb = enc.Finish();
  }  // the encoder is gone
  const std::vector<uint8_t> want = *owned;
  owned.reset();
  EXPECT_FALSE(released) << "the frame must keep the tensor alive";
  EXPECT_TRUE(AnySliceStartsAt(*bb, data)) << "4096 bytes must not be copied";

  // The frame reads the caller's memory, not a copy.
  pb::ExecuteRequest req;
  ASSERT_TRUE(req.ParseFromString(Flatten(*bb)));
  ASSERT_EQ(req.chunks_size(), 1);
  EXPECT_EQ(req.chunks(0).data(), std::string(want.begin(), want.end()));

  {
    grpc::ByteBuffer copy = *bb;  // shares the slices
    bb.reset();
    EXPECT_FALSE(released) << "a copy of the frame still refers to it";
  }
  EXPECT_TRUE(released) << "destroying the last frame must release the owner";
}

TEST(FrameEncoderTest, LargeChunkReflectsLaterWritesToTheSource) {
  std::vector<uint8_t> data(100000, 1);
  FrameEncoder enc;
  enc.AddChunk(0, 0, data.data(), data.size(), nullptr);  // caller-owned
  grpc::ByteBuffer bb = enc.Finish();
  EXPECT_TRUE(AnySliceStartsAt(bb, data.data()));
  data[99999] = 42;  // visible through the frame since it is not a copy
  pb::ExecuteRequest req;
  ASSERT_TRUE(req.ParseFromString(Flatten(bb)));
  ASSERT_EQ(req.chunks_size(), 1);
  EXPECT_EQ(static_cast<uint8_t>(req.chunks(0).data()[99999]), 42);
}

TEST(FrameEncoderTest, SmallChunkIsCopiedAndKeepaliveDropped) {
  bool released = false;
  std::shared_ptr<std::vector<uint8_t>> owned = MakeOwned(4095, &released);
  const uint8_t* data = owned->data();
  const std::string want(owned->begin(), owned->end());
  FrameEncoder enc;
  enc.AddChunk(0, 0, data, owned->size(), owned);
  grpc::ByteBuffer bb = enc.Finish();
  EXPECT_FALSE(AnySliceInside(bb, data, 4095));
  owned.reset();
  EXPECT_TRUE(released) << "a copied chunk does not need its owner";
  pb::ExecuteRequest req;
  ASSERT_TRUE(req.ParseFromString(Flatten(bb)));
  ASSERT_EQ(req.chunks_size(), 1);
  EXPECT_EQ(req.chunks(0).data(), want);
}

TEST(FrameEncoderTest, SeveralLargeChunksEachKeepTheirOwner) {
  bool r1 = false, r2 = false;
  auto o1 = MakeOwned(5000, &r1);
  auto o2 = MakeOwned(6000, &r2);
  FrameEncoder enc;
  enc.AddChunk(0, 0, o1->data(), o1->size(), o1);
  enc.AddChunk(0, 5000, o2->data(), 10, o2);  // small: copied
  enc.AddChunk(1, 0, o2->data(), o2->size(), o2);
  const std::string w1(o1->begin(), o1->end()), w2(o2->begin(), o2->end());
  o1.reset();
  o2.reset();
  std::optional<grpc::ByteBuffer> bb = enc.Finish();
  EXPECT_FALSE(r1);
  EXPECT_FALSE(r2);
  Recorder rec;
  ASSERT_TRUE(DecodeFrame(*bb, rec).ok());
  ASSERT_EQ(rec.chunks.size(), 3u);
  EXPECT_EQ(rec.chunks[0].data, w1);
  EXPECT_EQ(rec.chunks[1].offset, 5000u);
  EXPECT_EQ(rec.chunks[1].data, w2.substr(0, 10));
  EXPECT_EQ(rec.chunks[2].index, 1u);
  EXPECT_EQ(rec.chunks[2].data, w2);
  bb.reset();
  EXPECT_TRUE(r1);
  EXPECT_TRUE(r2);
}

// ---- DecodeFrame on protobuf-serialized messages ----

TEST(DecodeFrameTest, ReadsSerializedExecuteRequest) {
  pb::ExecuteRequest req;
  *req.mutable_header() = SampleHeader();
  const std::string d0 = Pattern(128, 10), d1 = Pattern(64, 11);
  pb::Chunk* c = req.add_chunks();
  c->set_index(0);
  c->set_offset(0);
  c->set_data(d0.substr(0, 100));
  c = req.add_chunks();
  c->set_index(1);
  c->set_offset(0);
  c->set_data(d1);
  c = req.add_chunks();
  c->set_index(0);
  c->set_offset(100);
  c->set_data(d0.substr(100));

  Recorder r;
  absl::Status s = DecodeFrame(OneSlice(req.SerializeAsString()), r);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(r.fields.size(), 1u);
  EXPECT_EQ(r.fields[0].first, kHeaderField);
  pb::CallHeader h;
  ASSERT_TRUE(h.ParseFromString(r.fields[0].second));
  EXPECT_EQ(h.handler(), "axpy");
  EXPECT_EQ(h.call_id(), "call-123");
  EXPECT_EQ(h.attributes().at("alpha").f64(), 2.5);
  ASSERT_EQ(r.chunks.size(), 3u);
  EXPECT_EQ(r.chunks[0].index, 0u);
  EXPECT_EQ(r.chunks[0].offset, 0u);
  EXPECT_EQ(r.chunks[0].data, d0.substr(0, 100));
  EXPECT_EQ(r.chunks[1].index, 1u);
  EXPECT_EQ(r.chunks[1].offset, 0u);
  EXPECT_EQ(r.chunks[1].data, d1);
  EXPECT_EQ(r.chunks[2].index, 0u);
  EXPECT_EQ(r.chunks[2].offset, 100u);
  EXPECT_EQ(r.chunks[2].data, d0.substr(100));
}

TEST(DecodeFrameTest, ReadsSerializedExecuteResponseWithStats) {
  pb::ExecuteResponse resp;
  resp.mutable_header()->set_agent_id("a");
  resp.mutable_header()->set_platform("cpu");
  pb::Chunk* c = resp.add_chunks();
  c->set_index(5);
  c->set_offset(12345678901ull);
  c->set_data("xyz");
  resp.add_chunks();  // an empty Chunk: index 0, offset 0, no data
  resp.mutable_stats()->set_execute_ns(99);

  Recorder r;
  absl::Status s = DecodeFrame(OneSlice(resp.SerializeAsString()), r);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(r.fields.size(), 2u);
  EXPECT_EQ(r.fields[0].first, kHeaderField);
  EXPECT_EQ(r.fields[1].first, kStatsField);
  pb::ResultHeader h;
  ASSERT_TRUE(h.ParseFromString(r.fields[0].second));
  EXPECT_EQ(h.agent_id(), "a");
  pb::CallStats st;
  ASSERT_TRUE(st.ParseFromString(r.fields[1].second));
  EXPECT_EQ(st.execute_ns(), 99);
  ASSERT_EQ(r.chunks.size(), 2u);
  EXPECT_EQ(r.chunks[0].index, 5u);
  EXPECT_EQ(r.chunks[0].offset, 12345678901ull);
  EXPECT_EQ(r.chunks[0].data, "xyz");
  EXPECT_EQ(r.chunks[1].index, 0u);
  EXPECT_EQ(r.chunks[1].offset, 0u);
  EXPECT_EQ(r.chunks[1].data, "");
}

TEST(DecodeFrameTest, ChunkFieldsOutOfOrderAndUnknownFieldsSkipped) {
  const std::string data = Pattern(300, 20);
  // Chunk: data first, then unknown fields of every wire type, then offset,
  // then index.
  std::string chunk = LenField(3, data) + VarintField(9, 77) + Tag(10, 1) + std::string(8, '\x11') +
                      Tag(11, 5) + std::string(4, '\x22') + LenField(12, "unknown bytes") +
                      VarintField(2, 4096) + VarintField(1, 3);
  // Top level: unknown fields around a header and the chunk.
  std::string frame = VarintField(15, 1) + LenField(1, SampleHeader().SerializeAsString()) +
                      Tag(20, 1) + std::string(8, '\0') + LenField(2, chunk) +
                      LenField(100, "ignored") + Tag(4, 5) + std::string(4, '\x7f') +
                      LenField(2, VarintField(1, 1) + LenField(3, "b") + VarintField(2, 9));

  // Sanity: protobuf reads the same thing.
  pb::ExecuteRequest req;
  ASSERT_TRUE(req.ParseFromString(frame));
  ASSERT_EQ(req.chunks_size(), 2);
  EXPECT_EQ(req.chunks(0).index(), 3u);
  EXPECT_EQ(req.chunks(0).offset(), 4096u);
  EXPECT_EQ(req.chunks(0).data(), data);

  Recorder r;
  absl::Status s = DecodeFrame(OneSlice(frame), r);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(r.fields.size(), 1u);
  EXPECT_EQ(r.fields[0].first, kHeaderField);
  EXPECT_EQ(r.fields[0].second, SampleHeader().SerializeAsString());
  ASSERT_EQ(r.chunks.size(), 2u);
  EXPECT_EQ(r.chunks[0].index, 3u);
  EXPECT_EQ(r.chunks[0].offset, 4096u);
  EXPECT_EQ(r.chunks[0].data, data);
  EXPECT_EQ(r.chunks[1].index, 1u);
  EXPECT_EQ(r.chunks[1].offset, 9u);
  EXPECT_EQ(r.chunks[1].data, "b");
}

TEST(DecodeFrameTest, RepeatedChunkFieldsLastOneWins) {
  // As in protobuf: a scalar field repeated in one message takes its last
  // value.
  std::string chunk = VarintField(1, 1) + LenField(3, "first") + VarintField(2, 5) +
                      VarintField(1, 2) + LenField(3, "second") + VarintField(2, 6);
  std::string frame = LenField(2, chunk);
  pb::ExecuteRequest req;
  ASSERT_TRUE(req.ParseFromString(frame));
  Recorder r;
  ASSERT_TRUE(DecodeFrame(OneSlice(frame), r).ok());
  ASSERT_EQ(r.chunks.size(), 1u);
  EXPECT_EQ(r.chunks[0].index, req.chunks(0).index());
  EXPECT_EQ(r.chunks[0].offset, req.chunks(0).offset());
  EXPECT_EQ(r.chunks[0].data, req.chunks(0).data());
  EXPECT_EQ(r.chunks[0].index, 2u);
  EXPECT_EQ(r.chunks[0].offset, 6u);
  EXPECT_EQ(r.chunks[0].data, "second");
}

// A 3 MiB request, cut into slices at awkward places.
struct BigFrame {
  std::string wire;
  std::string big;
  std::string small;
};

BigFrame MakeBigFrame() {
  BigFrame f;
  f.big = Pattern(3 << 20, 30);
  f.small = Pattern(1000, 31);
  pb::ExecuteRequest req;
  *req.mutable_header() = SampleHeader();
  pb::Chunk* c = req.add_chunks();
  c->set_index(1);
  c->set_offset(300);
  c->set_data(f.big);
  c = req.add_chunks();
  c->set_index(200);  // two-byte varint
  c->set_offset(1u << 21);
  c->set_data(f.small);
  f.wire = req.SerializeAsString();
  return f;
}

void ExpectBigFrame(const BigFrame& f, const grpc::ByteBuffer& bb) {
  Recorder r;
  absl::Status s = DecodeFrame(bb, r);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(r.fields.size(), 1u);
  EXPECT_EQ(r.fields[0].second, SampleHeader().SerializeAsString());
  ASSERT_EQ(r.chunks.size(), 2u);
  EXPECT_EQ(r.chunks[0].index, 1u);
  EXPECT_EQ(r.chunks[0].offset, 300u);
  EXPECT_EQ(r.chunks[0].data.size(), f.big.size());
  EXPECT_TRUE(r.chunks[0].data == f.big) << "3 MiB data differs";
  EXPECT_EQ(r.chunks[1].index, 200u);
  EXPECT_EQ(r.chunks[1].offset, 1u << 21);
  EXPECT_EQ(r.chunks[1].data, f.small);

  pb::CallHeader h;
  absl::StatusOr<bool> found = DecodeMessageField(bb, kHeaderField, &h);
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_TRUE(*found);
  EXPECT_EQ(h.handler(), "axpy");
}

TEST(DecodeFrameTest, LargeDataOverManySlicesCuttingThroughVarints) {
  const BigFrame f = MakeBigFrame();
  const std::string header = SampleHeader().SerializeAsString();
  // Layout: [0a][len varint][header][12][chunk len varint (3 bytes)]
  //         [08 01][10 ac 02][1a][data len varint (4 bytes)][data]...
  const size_t header_len_at = 1;
  const size_t chunk_tag_at = 1 + Varint(header.size()).size() + header.size();
  const size_t chunk_len_at = chunk_tag_at + 1;
  const std::string first_chunk_inner_prefix = VarintField(1, 1) + VarintField(2, 300) + Tag(3, 2);
  ASSERT_EQ(Varint(f.big.size()).size(), 4u);
  const size_t inner_at =
      chunk_len_at + Varint(first_chunk_inner_prefix.size() + 4 + f.big.size()).size();
  const size_t offset_varint_at = inner_at + 3;  // inside 10 ac 02
  const size_t data_len_at = inner_at + first_chunk_inner_prefix.size();
  const size_t data_at = data_len_at + 4;
  ASSERT_EQ(f.wire.substr(inner_at, first_chunk_inner_prefix.size()), first_chunk_inner_prefix);

  std::vector<size_t> cuts = {header_len_at,         // between tag and length
                              chunk_tag_at,          // at the chunk tag
                              chunk_len_at + 1,      // inside the chunk length
                              chunk_len_at + 2,      // ... again
                              offset_varint_at + 1,  // inside the offset
                              data_len_at + 1,       // inside the data length
                              data_len_at + 3,
                              data_at,  // at the start of the data
                              data_at,  // an empty slice
                              data_at + 1,
                              data_at + 1000000,
                              data_at + 2000001,
                              data_at + f.big.size() - 1,
                              data_at + f.big.size() + 1,  // in the next chunk
                              f.wire.size() - 500,
                              f.wire.size() - 1};
  ASSERT_TRUE(std::is_sorted(cuts.begin(), cuts.end()));
  grpc::ByteBuffer bb = Split(f.wire, cuts);
  ASSERT_EQ(bb.Length(), f.wire.size());
  ExpectBigFrame(f, bb);

  // Regular 64 KiB slices, as gRPC might deliver them, and odd ones.
  for (size_t step : {size_t{65536}, size_t{4099}, size_t{1} << 20}) {
    SCOPED_TRACE(step);
    std::vector<size_t> regular;
    for (size_t at = step; at < f.wire.size(); at += step) regular.push_back(at);
    ExpectBigFrame(f, Split(f.wire, regular));
  }
  ExpectBigFrame(f, OneSlice(f.wire));
}

TEST(DecodeFrameTest, EveryTwoWayAndByteWiseSplitOfASmallFrame) {
  pb::ExecuteResponse resp;
  resp.mutable_header()->set_agent_id("agent");
  pb::Chunk* c = resp.add_chunks();
  c->set_index(300);
  c->set_offset(70000);
  c->set_data(Pattern(200, 40));
  resp.mutable_stats()->set_queue_ns(123456789);
  const std::string wire = resp.SerializeAsString();

  auto check = [&](const grpc::ByteBuffer& bb) {
    Recorder r;
    absl::Status s = DecodeFrame(bb, r);
    ASSERT_TRUE(s.ok()) << s;
    ASSERT_EQ(r.fields.size(), 2u);
    EXPECT_EQ(r.fields[0].second, resp.header().SerializeAsString());
    EXPECT_EQ(r.fields[1].second, resp.stats().SerializeAsString());
    ASSERT_EQ(r.chunks.size(), 1u);
    EXPECT_EQ(r.chunks[0].index, 300u);
    EXPECT_EQ(r.chunks[0].offset, 70000u);
    EXPECT_EQ(r.chunks[0].data, resp.chunks(0).data());
  };
  for (size_t cut = 0; cut <= wire.size(); ++cut) {
    SCOPED_TRACE(cut);
    check(Split(wire, {cut}));
  }
  std::vector<size_t> all;
  for (size_t i = 1; i < wire.size(); ++i) all.push_back(i);
  check(Split(wire, all));
}

// ---- Malformed input ----

void ExpectMalformed(const std::string& frame, const std::string& why = "") {
  Recorder r;
  absl::Status s = DecodeFrame(OneSlice(frame), r);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("malformed farcall frame"));
  if (!why.empty()) {
    EXPECT_THAT(s.message(), HasSubstr(why));
  }
}

TEST(DecodeFrameTest, MalformedInput) {
  ExpectMalformed("\x0a", "truncated message field");  // tag, no length
  ExpectMalformed(
      "\x0a\x05"
      "abc",
      "truncated message field");
  ExpectMalformed("\x1a\x80", "truncated message field");  // length cut
  ExpectMalformed("\x12", "truncated chunk");
  ExpectMalformed("\x12\x05\x08\x01", "truncated chunk");
  // Data that runs past its chunk (but not past the frame).
  ExpectMalformed(
      "\x12\x03\x1a\x05"
      "ab"
      "cdefgh",
      "chunk data runs past");
  // A field inside the chunk that runs past it.
  ExpectMalformed(LenField(2, VarintField(1, 1) + Tag(9, 2)) +
                      "\x03"
                      "abc",
                  "chunk");
  ExpectMalformed(LenField(2, "\x08"), "chunk");  // index varint cut
  ExpectMalformed(LenField(2, "\x08\x80"), "chunk");
  ExpectMalformed("\x08", "");                                     // top-level varint cut
  ExpectMalformed("\x80", "truncated tag");                        // tag cut
  ExpectMalformed("\x08" + std::string(11, '\xff') + "\x01", "");  // long varint
  ExpectMalformed("\x0b", "bad field");                            // group start
  ExpectMalformed("\x0c", "bad field");                            // group end
  ExpectMalformed("\x0e", "bad field");                            // wire type 6
  ExpectMalformed("\x0f", "bad field");                            // wire type 7
  ExpectMalformed(Tag(5, 1) + "1234567", "bad field");             // fixed64 cut
  ExpectMalformed(Tag(5, 5) + "123", "bad field");                 // fixed32 cut
  ExpectMalformed(LenField(2, Tag(4, 3)), "bad field in chunk");
  ExpectMalformed(LenField(2, Tag(4, 1) + "1234"), "chunk");
  // Index wider than uint32.
  ExpectMalformed(LenField(2, VarintField(1, uint64_t{1} << 32)), "chunk index over 32 bits");
}

TEST(DecodeFrameTest, TruncationAgreesWithProtobuf) {
  pb::ExecuteRequest req;
  *req.mutable_header() = SampleHeader();
  pb::Chunk* c = req.add_chunks();
  c->set_index(2);
  c->set_offset(1000);
  c->set_data(Pattern(150, 50));
  c = req.add_chunks();
  c->set_index(0);
  c->set_data("q");
  const std::string wire = req.SerializeAsString();
  for (size_t n = 0; n < wire.size(); ++n) {
    SCOPED_TRACE(n);
    const std::string prefix = wire.substr(0, n);
    pb::ExecuteRequest parsed;
    const bool pb_ok = parsed.ParseFromString(prefix);
    Recorder r;
    absl::Status s = DecodeFrame(OneSlice(prefix), r);
    EXPECT_EQ(s.ok(), pb_ok) << s;
    if (!s.ok()) {
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    }
    pb::CallHeader header;
    absl::StatusOr<bool> found = DecodeMessageField(OneSlice(prefix), kHeaderField, &header);
    EXPECT_EQ(found.ok(), pb_ok) << found.status();
    if (!found.ok()) {
      EXPECT_EQ(found.status().code(), absl::StatusCode::kInvalidArgument);
    }
  }
}

// Field number 0 is not valid protobuf; protobuf's own parser refuses it,
// both at the top level and inside a Chunk.
TEST(DecodeFrameTest, FieldNumberZeroIsMalformed) {
  for (const std::string& frame : {std::string("\x00\x00", 2), std::string("\x02\x00", 2),
                                   LenField(2, std::string("\x00\x00", 2))}) {
    pb::ExecuteRequest req;
    EXPECT_FALSE(req.ParseFromString(frame));
    ExpectMalformed(frame);
  }
}

// A tag varint longer than protobuf allows (over 5 bytes, field number over
// 32 bits) must not be truncated into a valid field number: here
// ((2^32 + 2) << 3 | 2) would alias to field 2 (chunks).
TEST(DecodeFrameTest, OverlongTagIsMalformed) {
  const uint64_t tag = (((uint64_t{1} << 32) | 2) << 3) | 2;
  const std::string frame = Varint(tag) + Varint(2) + VarintField(1, 5);
  pb::ExecuteRequest req;
  EXPECT_FALSE(req.ParseFromString(frame));
  ExpectMalformed(frame);
}

class FailingVisitor : public Recorder {
 public:
  absl::Status OnChunk(uint32_t index, uint64_t offset, const ChunkBytes& data) override {
    absl::Status s = Recorder::OnChunk(index, offset, data);
    if (index == fail_at) return absl::ResourceExhaustedError("stop here");
    return s;
  }
  absl::Status OnMessageField(uint32_t field, absl::string_view bytes) override {
    if (fail_field == field) return absl::DataLossError("bad header");
    return Recorder::OnMessageField(field, bytes);
  }
  uint32_t fail_at = UINT32_MAX;
  uint32_t fail_field = 0;
};

TEST(DecodeFrameTest, VisitorErrorStopsTheWalk) {
  std::string frame = LenField(1, "") + LenField(2, VarintField(1, 1)) +
                      LenField(2, VarintField(1, 2)) + LenField(2, VarintField(1, 3)) +
                      LenField(3, "");
  FailingVisitor v;
  v.fail_at = 2;
  absl::Status s = DecodeFrame(OneSlice(frame), v);
  EXPECT_EQ(s, absl::ResourceExhaustedError("stop here"));
  ASSERT_EQ(v.chunks.size(), 2u);
  EXPECT_EQ(v.chunks[1].index, 2u);
  EXPECT_EQ(v.fields.size(), 1u);  // the header only; stats never reached

  FailingVisitor w;
  w.fail_field = kHeaderField;
  s = DecodeFrame(OneSlice(frame), w);
  EXPECT_EQ(s, absl::DataLossError("bad header"));
  EXPECT_TRUE(w.chunks.empty());
}

// ---- DecodeMessageField ----

TEST(DecodeMessageFieldTest, FindsHeaderAndSkipsChunks) {
  const BigFrame f = MakeBigFrame();
  pb::CallHeader h;
  absl::StatusOr<bool> found = DecodeMessageField(OneSlice(f.wire), kHeaderField, &h);
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_TRUE(*found);
  EXPECT_EQ(h.SerializeAsString(), SampleHeader().SerializeAsString());
}

TEST(DecodeMessageFieldTest, HeaderAfterChunks) {
  pb::CallStats stats;
  stats.set_transfer_ns(5);
  std::string frame = LenField(2, VarintField(1, 1) + LenField(3, "abc")) +
                      LenField(3, stats.SerializeAsString()) + LenField(2, VarintField(1, 2));
  pb::CallStats got;
  absl::StatusOr<bool> found = DecodeMessageField(OneSlice(frame), kStatsField, &got);
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_TRUE(*found);
  EXPECT_EQ(got.transfer_ns(), 5);

  pb::ResultHeader header;
  found = DecodeMessageField(OneSlice(frame), kHeaderField, &header);
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_FALSE(*found);
}

TEST(DecodeMessageFieldTest, ChunkContentsAreNotRead) {
  // The chunk's inside is garbage: DecodeFrame refuses it, but
  // DecodeMessageField only skips it as a length-delimited field.
  std::string frame = LenField(1, SampleHeader().SerializeAsString()) + LenField(2, "\x0b\xff\xff");
  pb::CallHeader h;
  absl::StatusOr<bool> found = DecodeMessageField(OneSlice(frame), kHeaderField, &h);
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_TRUE(*found);
  EXPECT_EQ(h.handler(), "axpy");
  Recorder r;
  EXPECT_EQ(DecodeFrame(OneSlice(frame), r).code(), absl::StatusCode::kInvalidArgument);
}

TEST(DecodeMessageFieldTest, LastOneWins) {
  pb::CallStats a, b;
  a.set_queue_ns(1);
  a.set_execute_ns(7);
  b.set_queue_ns(2);
  std::string frame = LenField(3, a.SerializeAsString()) + LenField(3, b.SerializeAsString());
  pb::CallStats got;
  absl::StatusOr<bool> found = DecodeMessageField(OneSlice(frame), kStatsField, &got);
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_TRUE(*found);
  EXPECT_EQ(got.queue_ns(), 2);
  EXPECT_EQ(got.execute_ns(), 0);
}

TEST(DecodeMessageFieldTest, UnparsableMessage) {
  std::string frame = LenField(1,
                               "\x0a\x05"
                               "ab");  // truncated inside
  pb::CallHeader h;
  absl::StatusOr<bool> found = DecodeMessageField(OneSlice(frame), kHeaderField, &h);
  ASSERT_FALSE(found.ok());
  EXPECT_EQ(found.status().code(), absl::StatusCode::kInvalidArgument);
  // Worded as the agent words it, so that router and agent answer alike.
  EXPECT_EQ(found.status().message(), "the call header does not parse.");
}

TEST(DecodeMessageFieldTest, UnparsableStatsNameTheField) {
  std::string frame = LenField(3, "\x08");  // truncated varint inside
  pb::CallStats st;
  absl::StatusOr<bool> found = DecodeMessageField(OneSlice(frame), kStatsField, &st);
  ASSERT_FALSE(found.ok());
  EXPECT_THAT(found.status().message(), HasSubstr("field 3 does not parse"));
}

TEST(DecodeMessageFieldTest, MalformedFrame) {
  pb::CallHeader h;
  for (const std::string& frame : {std::string("\x0a\x05"
                                               "ab"),
                                   std::string("\x12\x09"
                                               "abc"),
                                   std::string("\x0b"), std::string("\x80")}) {
    absl::StatusOr<bool> found = DecodeMessageField(OneSlice(frame), kHeaderField, &h);
    ASSERT_FALSE(found.ok());
    EXPECT_EQ(found.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(found.status().message(), HasSubstr("malformed farcall frame"));
  }
}

TEST(DecodeMessageFieldTest, EmptyFrame) {
  pb::CallHeader h;
  absl::StatusOr<bool> found = DecodeMessageField(OneSlice(""), kHeaderField, &h);
  ASSERT_TRUE(found.ok());
  EXPECT_FALSE(*found);
}

// ---- Round trip through encoder and decoder ----

TEST(FrameCodecTest, EncoderToDecoderRoundTrip) {
  const std::string big = Pattern(1 << 20, 60);
  bool released = false;
  auto owned = MakeOwned(70000, &released);
  FrameEncoder enc;
  enc.AddMessageField(kHeaderField, SampleHeader());
  enc.AddChunk(0, 0, reinterpret_cast<const uint8_t*>(big.data()), big.size(), nullptr);
  enc.AddChunk(UINT32_MAX, UINT64_MAX - 1, owned->data(), owned->size(), owned);
  enc.AddChunk(9, 0, nullptr, 0, nullptr);
  pb::CallStats st;
  st.set_queue_ns(4);
  enc.AddMessageField(kStatsField, st);
  const std::string w(owned->begin(), owned->end());
  owned.reset();
  {
    grpc::ByteBuffer bb = enc.Finish();
    Recorder r;
    absl::Status s = DecodeFrame(bb, r);
    ASSERT_TRUE(s.ok()) << s;
    ASSERT_EQ(r.fields.size(), 2u);
    EXPECT_EQ(r.fields[0].second, SampleHeader().SerializeAsString());
    EXPECT_EQ(r.fields[1].first, kStatsField);
    EXPECT_EQ(r.fields[1].second, st.SerializeAsString());
    ASSERT_EQ(r.chunks.size(), 3u);
    EXPECT_EQ(r.chunks[0].index, 0u);
    EXPECT_EQ(r.chunks[0].offset, 0u);
    EXPECT_TRUE(r.chunks[0].data == big);
    EXPECT_EQ(r.chunks[1].index, UINT32_MAX);
    EXPECT_EQ(r.chunks[1].offset, UINT64_MAX - 1);
    EXPECT_EQ(r.chunks[1].data, w);
    EXPECT_EQ(r.chunks[2].index, 9u);
    EXPECT_EQ(r.chunks[2].data, "");
    EXPECT_FALSE(released);
  }
  EXPECT_TRUE(released);
}

}  // namespace
}  // namespace farcall
