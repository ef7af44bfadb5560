#include "core/chunk_assembler.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace farcall {
namespace {

using ::testing::HasSubstr;

TensorSpec Spec(DType d, std::vector<int64_t> dims) {
  TensorSpec s;
  s.dtype = d;
  s.dims = std::move(dims);
  return s;
}

// Owns the buffers the assembler writes into.
struct Buffers {
  std::vector<std::vector<uint8_t>> data;
  std::vector<ChunkAssembler::Target> targets;

  explicit Buffers(const std::vector<TensorSpec>& specs) {
    data.reserve(specs.size());
    for (const TensorSpec& s : specs) {
      int64_t size = *ByteSize(s, "t");
      data.emplace_back(size, 0xEE);
      ChunkAssembler::Target t;
      t.spec = s;
      t.size = size;
      t.data = data.back().data();
      targets.push_back(t);
    }
  }
};

// Accepts and copies `bytes` as chunk [offset, offset + bytes.size()).
absl::Status Put(ChunkAssembler& a, uint32_t index, uint64_t offset,
                 const std::vector<uint8_t>& bytes) {
  absl::StatusOr<uint8_t*> dst = a.Accept(index, offset, bytes.size());
  if (!dst.ok()) return dst.status();
  if (!bytes.empty()) std::memcpy(*dst, bytes.data(), bytes.size());
  return absl::OkStatus();
}

std::vector<uint8_t> Iota(size_t n, uint8_t start) {
  std::vector<uint8_t> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

TEST(ChunkAssemblerTest, InOrderChunksLandInTheRightBytes) {
  Buffers b({Spec(DType::kF32, {4}), Spec(DType::kU8, {10})});  // 16, 10 bytes
  ChunkAssembler a("args", b.targets);
  std::vector<uint8_t> t0 = Iota(16, 0);
  std::vector<uint8_t> t1 = Iota(10, 100);

  // Interleaved between tensors, increasing within each.
  absl::StatusOr<uint8_t*> p = a.Accept(0, 0, 5);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(*p, b.data[0].data());
  std::memcpy(*p, t0.data(), 5);

  p = a.Accept(1, 0, 3);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(*p, b.data[1].data());
  std::memcpy(*p, t1.data(), 3);

  p = a.Accept(0, 5, 11);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(*p, b.data[0].data() + 5);
  std::memcpy(*p, t0.data() + 5, 11);

  p = a.Accept(1, 3, 7);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(*p, b.data[1].data() + 3);
  std::memcpy(*p, t1.data() + 3, 7);

  EXPECT_TRUE(a.Finish().ok()) << a.Finish();
  EXPECT_EQ(b.data[0], t0);
  EXPECT_EQ(b.data[1], t1);
  EXPECT_EQ(a.received_bytes(), 26);
}

TEST(ChunkAssemblerTest, ManySmallChunks) {
  Buffers b({Spec(DType::kS32, {25})});  // 100 bytes
  ChunkAssembler a("results", b.targets);
  std::vector<uint8_t> want = Iota(100, 7);
  for (uint64_t off = 0; off < 100; off += 7) {
    uint64_t n = std::min<uint64_t>(7, 100 - off);
    ASSERT_TRUE(
        Put(a, 0, off, std::vector<uint8_t>(want.begin() + off, want.begin() + off + n)).ok());
    EXPECT_EQ(a.received_bytes(), static_cast<int64_t>(off + n));
  }
  EXPECT_TRUE(a.Finish().ok());
  EXPECT_EQ(b.data[0], want);
}

TEST(ChunkAssemblerTest, EmptyChunksAreAccepted) {
  Buffers b({Spec(DType::kU8, {4})});
  ChunkAssembler a("args", b.targets);
  EXPECT_TRUE(Put(a, 0, 0, {}).ok());
  EXPECT_TRUE(Put(a, 0, 0, {1, 2}).ok());
  EXPECT_TRUE(Put(a, 0, 2, {}).ok());
  EXPECT_TRUE(Put(a, 0, 2, {3, 4}).ok());
  EXPECT_TRUE(Put(a, 0, 4, {}).ok());
  EXPECT_TRUE(a.Finish().ok());
  EXPECT_EQ(b.data[0], (std::vector<uint8_t>{1, 2, 3, 4}));
  EXPECT_EQ(a.received_bytes(), 4);
}

TEST(ChunkAssemblerTest, UnknownIndex) {
  Buffers b({Spec(DType::kF32, {4}), Spec(DType::kF32, {4})});
  ChunkAssembler a("args", b.targets);
  absl::StatusOr<uint8_t*> p = a.Accept(2, 8, 4);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(p.status().message(), HasSubstr("args[2]"));
  EXPECT_THAT(p.status().message(), HasSubstr("offset 8"));
  EXPECT_EQ(p.status().message(), "chunk for args[2] at offset 8, but the call has 2 args.");
  EXPECT_EQ(a.received_bytes(), 0);
}

TEST(ChunkAssemblerTest, UnknownIndexWithNoTensors) {
  ChunkAssembler a("results", {});
  absl::StatusOr<uint8_t*> p = a.Accept(0, 0, 1);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(p.status().message(), HasSubstr("results[0]"));
  EXPECT_TRUE(a.Finish().ok());
}

TEST(ChunkAssemblerTest, Gap) {
  Buffers b({Spec(DType::kF32, {4, 8})});  // 128 bytes
  ChunkAssembler a("args", b.targets);
  ASSERT_TRUE(a.Accept(0, 0, 32).ok());
  absl::StatusOr<uint8_t*> p = a.Accept(0, 40, 8);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(p.status().message(), HasSubstr("args[0]"));
  EXPECT_THAT(p.status().message(), HasSubstr("float32[4,8]"));
  EXPECT_THAT(p.status().message(), HasSubstr("offset 40"));
  EXPECT_THAT(p.status().message(), HasSubstr("[32, 40)"));
  EXPECT_EQ(p.status().message(),
            "args[0] (float32[4,8], 128 bytes): chunk at offset 40 leaves a "
            "gap; bytes [32, 40) were never sent.");
  EXPECT_EQ(a.received_bytes(), 32);
}

TEST(ChunkAssemblerTest, GapAtStart) {
  Buffers b({Spec(DType::kU8, {8})});
  ChunkAssembler a("results", b.targets);
  absl::StatusOr<uint8_t*> p = a.Accept(0, 1, 7);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(p.status().message(), HasSubstr("results[0]"));
  EXPECT_THAT(p.status().message(), HasSubstr("[0, 1)"));
}

TEST(ChunkAssemblerTest, Overlap) {
  Buffers b({Spec(DType::kU8, {3}), Spec(DType::kF32, {4, 8})});
  ChunkAssembler a("args", b.targets);
  ASSERT_TRUE(a.Accept(1, 0, 64).ok());
  absl::StatusOr<uint8_t*> p = a.Accept(1, 60, 10);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(p.status().message(), HasSubstr("args[1]"));
  EXPECT_THAT(p.status().message(), HasSubstr("offset 60"));
  EXPECT_EQ(p.status().message(),
            "args[1] (float32[4,8], 128 bytes): chunk at offset 60 overlaps "
            "bytes already received [0, 64).");
  // The same chunk twice is an overlap too.
  p = a.Accept(1, 0, 64);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(p.status().message(), HasSubstr("overlaps"));
  EXPECT_EQ(a.received_bytes(), 64);
}

TEST(ChunkAssemblerTest, PastEnd) {
  Buffers b({Spec(DType::kF32, {4, 8})});  // 128 bytes
  ChunkAssembler a("args", b.targets);
  ASSERT_TRUE(a.Accept(0, 0, 100).ok());
  absl::StatusOr<uint8_t*> p = a.Accept(0, 100, 29);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(p.status().message(), HasSubstr("args[0]"));
  EXPECT_EQ(p.status().message(),
            "args[0] (float32[4,8], 128 bytes): chunk [100, 129) runs past "
            "the end of the tensor at 128.");
  EXPECT_EQ(a.received_bytes(), 100);
  // The exact remainder still fits.
  EXPECT_TRUE(a.Accept(0, 100, 28).ok());
  EXPECT_TRUE(a.Finish().ok());
}

TEST(ChunkAssemblerTest, PastEndWithHugeSizeDoesNotWrap) {
  Buffers b({Spec(DType::kU8, {16})});
  ChunkAssembler a("args", b.targets);
  ASSERT_TRUE(a.Accept(0, 0, 8).ok());
  absl::StatusOr<uint8_t*> p = a.Accept(0, 8, UINT64_MAX - 4);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(p.status().message(), HasSubstr("runs past the end"));
}

TEST(ChunkAssemblerTest, ChunkToZeroSizeTensorPastEnd) {
  Buffers b({Spec(DType::kF32, {0})});
  ChunkAssembler a("args", b.targets);
  absl::StatusOr<uint8_t*> p = a.Accept(0, 0, 1);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(p.status().message(), HasSubstr("args[0] (float32[0], 0 bytes)"));
  EXPECT_THAT(p.status().message(), HasSubstr("runs past the end"));
}

TEST(ChunkAssemblerTest, MissingDataAtFinish) {
  Buffers b({Spec(DType::kU8, {4}), Spec(DType::kF32, {4, 8}), Spec(DType::kU8, {2})});
  ChunkAssembler a("args", b.targets);
  ASSERT_TRUE(a.Accept(0, 0, 4).ok());
  ASSERT_TRUE(a.Accept(1, 0, 50).ok());
  absl::Status s = a.Finish();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("args[1]"));
  EXPECT_EQ(s.message(),
            "args[1] (float32[4,8], 128 bytes): data missing at half-close; "
            "received [0, 50) of [0, 128).");
}

TEST(ChunkAssemblerTest, MissingDataNamesFirstIncompleteTensor) {
  Buffers b({Spec(DType::kU8, {4}), Spec(DType::kU8, {4})});
  ChunkAssembler a("results", b.targets);
  ASSERT_TRUE(a.Accept(1, 0, 4).ok());
  absl::Status s = a.Finish();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "results[0] (uint8[4], 4 bytes): data missing at half-close; "
            "received [0, 0) of [0, 4).");
}

TEST(ChunkAssemblerTest, ZeroSizeTensorsNeedNoChunk) {
  Buffers b({Spec(DType::kF32, {0}), Spec(DType::kU8, {2}), Spec(DType::kC128, {3, 0})});
  ChunkAssembler a("args", b.targets);
  EXPECT_TRUE(a.Finish().code() == absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(Put(a, 1, 0, {9, 8}).ok());
  EXPECT_TRUE(a.Finish().ok()) << a.Finish();
  EXPECT_EQ(a.received_bytes(), 2);
}

TEST(ChunkAssemblerTest, NoTensorsFinishesAtOnce) {
  ChunkAssembler a("args", {});
  EXPECT_TRUE(a.Finish().ok());
  EXPECT_EQ(a.received_bytes(), 0);
}

TEST(ChunkAssemblerTest, ReceivedBytesCountsOnlyAcceptedChunks) {
  Buffers b({Spec(DType::kU8, {10}), Spec(DType::kU8, {5})});
  ChunkAssembler a("args", b.targets);
  EXPECT_EQ(a.received_bytes(), 0);
  ASSERT_TRUE(a.Accept(0, 0, 6).ok());
  EXPECT_EQ(a.received_bytes(), 6);
  ASSERT_FALSE(a.Accept(0, 7, 1).ok());  // gap
  ASSERT_FALSE(a.Accept(0, 6, 5).ok());  // past end
  ASSERT_FALSE(a.Accept(3, 0, 1).ok());  // unknown
  EXPECT_EQ(a.received_bytes(), 6);
  ASSERT_TRUE(a.Accept(1, 0, 5).ok());
  ASSERT_TRUE(a.Accept(0, 6, 4).ok());
  EXPECT_EQ(a.received_bytes(), 15);
  EXPECT_TRUE(a.Finish().ok());
}

}  // namespace
}  // namespace farcall
