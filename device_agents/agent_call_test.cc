// AgentCall on a device whose memory the host cannot address, simulated: a
// fake device whose copies run only when the stream is waited on, so a call
// that frees or reuses host memory before its copy ran reads garbage here.
// Covers the staging path (block by block, overlapping the receiving), the
// result pipeline, pool exhaustion, and sticky device errors.
#include "device_agents/agent_call.h"

#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/wire/frame_codec.h"
#include "core/wire/proto_convert.h"
#include "device_agents/cpu/builtin_handlers.h"
#include "device_agents/staging_pool.h"
#include "farcall/handler.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace farcall::agent {
namespace {

using ::testing::HasSubstr;

class FakeDevice;

// Device memory the host "cannot address": host_ptr() is null. Handlers
// get device_ptr(), which is real host memory, so host handlers run on it.
class FakeMemory final : public DeviceMemory {
 public:
  explicit FakeMemory(int64_t size) : bytes_(size) {}
  void* device_ptr() override { return bytes_.data(); }
  uint8_t* host_ptr() override { return nullptr; }
  int64_t size() const override { return static_cast<int64_t>(bytes_.size()); }

 private:
  std::vector<uint8_t> bytes_;
};

// An in-order queue whose copies run only when waited on.
class FakeStream final : public Stream {
 public:
  FarcallStreamKind kind() const override { return FARCALL_STREAM_NONE; }
  void* native() override { return this; }
  absl::Status CopyToDevice(const void* host, DeviceMemory& dst, int64_t offset,
                            int64_t size) override {
    ++h2d_enqueued;
    ops_.push_back(
        [=, &dst] { std::memcpy(static_cast<uint8_t*>(dst.device_ptr()) + offset, host, size); });
    return absl::OkStatus();
  }
  absl::Status CopyToHost(DeviceMemory& src, int64_t offset, int64_t size, void* host) override {
    ++d2h_enqueued;
    ops_.push_back([=, &src] {
      std::memcpy(host, static_cast<const uint8_t*>(src.device_ptr()) + offset, size);
    });
    return absl::OkStatus();
  }
  // The handler is a host function: on a real device it would be enqueued
  // after the copies, so here they run first.
  absl::Status Invoke(const RegisteredHandler& handler, HandlerInvocation& inv) override {
    RunUpTo(enqueued());
    return InvokeHandler(handler.fn, inv);
  }
  absl::Status Synchronize() override {
    RunUpTo(enqueued());
    return absl::OkStatus();
  }
  size_t enqueued() const { return done_ + ops_.size(); }
  // Expires with the stream: a block recorded on it may outlive it (a real
  // event does), and must not wait on a stream that is gone.
  std::weak_ptr<int> alive() const { return alive_; }
  void RunUpTo(size_t mark) {
    while (done_ < mark && !ops_.empty()) {
      ops_.front()();
      ops_.pop_front();
      ++done_;
    }
  }

  int h2d_enqueued = 0;
  int d2h_enqueued = 0;

 private:
  std::deque<std::function<void()>> ops_;
  size_t done_ = 0;
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);
};

class FakeBlock final : public StagingBlock {
 public:
  explicit FakeBlock(int64_t size) : data_(size) {}
  uint8_t* data() override { return data_.data(); }
  int64_t size() const override { return static_cast<int64_t>(data_.size()); }
  absl::Status Record(Stream& stream) override {
    stream_ = static_cast<FakeStream*>(&stream);
    stream_alive_ = stream_->alive();
    mark_ = stream_->enqueued();
    return absl::OkStatus();
  }
  absl::Status Wait() override {
    if (stream_ != nullptr && !stream_alive_.expired()) stream_->RunUpTo(mark_);
    stream_ = nullptr;
    return absl::OkStatus();
  }

 private:
  std::vector<uint8_t> data_;
  FakeStream* stream_ = nullptr;
  std::weak_ptr<int> stream_alive_;
  size_t mark_ = 0;
};

class FakeDevice final : public Device {
 public:
  FakeDevice(int blocks, int64_t block_bytes)
      : pool_(StagingPool::Create(blocks * block_bytes, block_bytes, [](int64_t n) {
          return absl::StatusOr<std::unique_ptr<StagingBlock>>(std::make_unique<FakeBlock>(n));
        })) {}
  Platform platform() const override { return Platform::kCpu; }
  int ordinal() const override { return 0; }
  std::string name() const override { return "fake"; }
  int64_t memory_bytes() const override { return 1 << 30; }
  int64_t memory_used_bytes() const override { return 0; }
  absl::StatusOr<std::unique_ptr<DeviceMemory>> Allocate(int64_t size) override {
    if (size > (64 << 20)) return absl::ResourceExhaustedError("fake: out of memory");
    return std::make_unique<FakeMemory>(size);
  }
  absl::StatusOr<std::unique_ptr<Stream>> AcquireStream() override {
    auto s = std::make_unique<FakeStream>();
    last_stream = s.get();
    return s;
  }
  std::unique_ptr<StagingBlock> TryAcquireStaging() override { return pool_->TryAcquire(); }
  absl::Status health() const override { return sticky; }

  FakeStream* last_stream = nullptr;
  absl::Status sticky;

 private:
  std::shared_ptr<StagingPool> pool_;
};

FakeDevice* g_device = nullptr;

// Decodes response frames into result bytes.
struct Collector : FrameVisitor {
  std::map<uint32_t, std::string> results;
  v1::ResultHeader header;
  absl::Status OnMessageField(uint32_t field, absl::string_view bytes) override {
    if (field == kHeaderField) header.ParseFromString(std::string(bytes));
    return absl::OkStatus();
  }
  absl::Status OnChunk(uint32_t index, uint64_t offset, const ChunkBytes& data) override {
    std::string& r = results[index];
    EXPECT_EQ(r.size(), offset);
    std::string part(data.size(), '\0');
    data.CopyTo(reinterpret_cast<uint8_t*>(part.data()));
    r += part;
    return absl::OkStatus();
  }
};

// A handler that breaks the device for good, as an illegal address would.
sdk::Status Explode(sdk::CallFrame&) {
  g_device->sticky = absl::InternalError("fake: illegal address; the context is lost");
  return sdk::Internal("explode: kernel faulted");
}

constexpr int64_t kBlock = 4096;

class AgentCallDeviceTest : public ::testing::Test {
 protected:
  void Make(int pool_blocks) {
    auto dev = std::make_unique<FakeDevice>(pool_blocks, kBlock);
    g_device = dev.get();
    state_.config.platform = Platform::kCpu;
    state_.config.agent_id = "test-agent";
    state_.backend.devices.push_back(std::move(dev));
    state_.admission = std::make_unique<Admission>(int64_t{1} << 30);
    for (const FarcallHandlerDef& d : cpu::BuiltinHandlers()) {
      ASSERT_TRUE(state_.registry.Register(d, "builtin").ok());
    }
    ASSERT_TRUE(
        state_.registry.Register(FARCALL_HANDLER_DEF("explode", "cpu", 0, Explode), "test").ok());
  }

  AgentState state_;
};

// "" when equal, else where they first differ (never the bytes themselves).
std::string Diff(const std::string& got, const std::vector<uint8_t>& want) {
  if (got.size() != want.size()) {
    return "size " + std::to_string(got.size()) + " != " + std::to_string(want.size());
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (static_cast<uint8_t>(got[i]) != want[i]) return "first differs at " + std::to_string(i);
  }
  return "";
}

std::vector<uint8_t> Pattern(int64_t n) {
  std::vector<uint8_t> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 31 + (i >> 9));
  return v;
}

// Sends `data` as copy's arg in frames of `frame_bytes`, runs it, and
// returns the result collected from frames of `out_bytes` (0: one frame).
std::string RunCopy(AgentState& state, const std::vector<uint8_t>& data, int64_t frame_bytes,
                    int64_t out_bytes, bool alias,
                    std::function<void(int frame)> after_frame = nullptr,
                    std::function<void(int frame)> after_response = nullptr) {
  const int64_t n = static_cast<int64_t>(data.size());
  AgentCall call(state);
  std::vector<grpc::ByteBuffer> frames;
  for (int64_t off = 0; off < n || frames.empty(); off += frame_bytes) {
    FrameEncoder enc;
    if (frames.empty()) {
      v1::CallHeader h;
      h.set_handler("copy");
      h.add_platforms("cpu");
      *h.add_args() = SpecToProto(TensorSpec{DType::kU8, {n}});
      *h.add_results() = SpecToProto(TensorSpec{DType::kU8, {n}});
      if (alias) (*h.mutable_input_output_aliases())[0] = 0;
      enc.AddMessageField(kHeaderField, h);
    }
    if (off < n) enc.AddChunk(0, off, data.data() + off, std::min(frame_bytes, n - off), nullptr);
    frames.push_back(enc.Finish());
  }
  EXPECT_TRUE(call.Begin(frames[0]).ok());
  call.Admitted();
  EXPECT_TRUE(call.Allocate().ok());
  for (size_t f = 0; f < frames.size(); ++f) {
    absl::Status s = call.OnRequestFrame(frames[f]);
    EXPECT_TRUE(s.ok()) << s;
    if (after_frame) after_frame(static_cast<int>(f));
  }
  EXPECT_TRUE(call.EndOfInputs().ok());
  CancellationToken cancel;
  absl::Status run = call.Run(cancel);
  EXPECT_TRUE(run.ok()) << run;
  Collector c;
  for (int f = 0;; ++f) {
    grpc::ByteBuffer out;
    absl::StatusOr<bool> more = call.NextResponseFrame(out_bytes, &out);
    EXPECT_TRUE(more.ok()) << more.status();
    if (!more.ok() || !*more) break;
    EXPECT_TRUE(DecodeFrame(out, c).ok());
    if (after_response) after_response(f);
  }
  return c.results[0];
}

// Whether a call of `handler` with one u8[n] arg and result runs inline.
bool RunsInline(AgentState& state, const std::string& handler, int64_t n) {
  AgentCall call(state);
  v1::CallHeader h;
  h.set_handler(handler);
  h.add_platforms(std::string(PlatformName(state.config.platform)));
  *h.add_args() = SpecToProto(TensorSpec{DType::kU8, {n}});
  *h.add_results() = SpecToProto(TensorSpec{DType::kU8, {n}});
  FrameEncoder enc;
  enc.AddMessageField(kHeaderField, h);
  EXPECT_TRUE(call.Begin(enc.Finish()).ok());
  return call.RunsInline();
}

TEST_F(AgentCallDeviceTest, OnlySmallCallsOfQuickHandlersRunInline) {
  Make(4);
  state_.config.inline_call_bytes = 1024;
  EXPECT_TRUE(RunsInline(state_, "copy", 512));    // 512 in + 512 out
  EXPECT_FALSE(RunsInline(state_, "copy", 513));   // 1026 bytes
  EXPECT_FALSE(RunsInline(state_, "sleep", 8));    // not FARCALL_TRAIT_QUICK
  EXPECT_FALSE(RunsInline(state_, "explode", 8));  // a plugin without the trait
  state_.config.inline_call_bytes = 0;
  EXPECT_FALSE(RunsInline(state_, "copy", 0));
  // Device work never runs inline (the fake device serves any platform).
  state_.config.inline_call_bytes = 1024;
  state_.config.platform = Platform::kOneApi;
  for (const FarcallHandlerDef& d : cpu::BuiltinHandlers()) {
    FarcallHandlerDef on_oneapi = d;
    on_oneapi.platform = "oneapi";
    ASSERT_TRUE(state_.registry.Register(on_oneapi, "builtin").ok());
  }
  EXPECT_FALSE(RunsInline(state_, "copy", 8));
}

// The bytes a call of one u8[n] arg and result is admitted for, over UCX
// or not.
int64_t Footprint(AgentState& state, int64_t n, bool ucx) {
  AgentCall call(state);
  v1::CallHeader h;
  h.set_handler("copy");
  h.add_platforms(std::string(PlatformName(state.config.platform)));
  *h.add_args() = SpecToProto(TensorSpec{DType::kU8, {n}});
  *h.add_results() = SpecToProto(TensorSpec{DType::kU8, {n}});
  if (ucx) {
    h.mutable_ucx()->set_worker_address("w");
    h.mutable_ucx()->set_key(std::string(16, 'k'));
  }
  FrameEncoder enc;
  enc.AddMessageField(kHeaderField, h);
  absl::Status s = call.Begin(enc.Finish());
  EXPECT_TRUE(s.ok()) << s;
  return call.footprint();
}

// A device agent's UCX call holds its tensors twice (device memory, and the
// host memory its pieces land in): the budget counts both.
TEST_F(AgentCallDeviceTest, ADeviceUcxCallIsAdmittedForItsHostCopiesToo) {
  Make(4);
  const int64_t n = 1 << 20;
  const int64_t cpu_plain = Footprint(state_, n, false);
  EXPECT_EQ(Footprint(state_, n, true), cpu_plain);  // cpu: the pieces land in place
  state_.config.platform = Platform::kOneApi;
  for (const FarcallHandlerDef& d : cpu::BuiltinHandlers()) {
    FarcallHandlerDef on_oneapi = d;
    on_oneapi.platform = "oneapi";
    ASSERT_TRUE(state_.registry.Register(on_oneapi, "builtin").ok());
  }
  EXPECT_EQ(Footprint(state_, n, false), cpu_plain);
  EXPECT_EQ(Footprint(state_, n, true), cpu_plain + 2 * n);
}

TEST_F(AgentCallDeviceTest, InputsGoToTheDeviceBlockByBlockWhileTheNextArrive) {
  Make(/*pool_blocks=*/8);
  const std::vector<uint8_t> data = Pattern(5 * kBlock + 123);
  std::vector<int> enqueued_after_frame;
  std::string got = RunCopy(state_, data, kBlock, kBlock, false, [&](int) {
    enqueued_after_frame.push_back(g_device->last_stream->h2d_enqueued);
  });
  EXPECT_EQ(Diff(got, data), "");
  // Each full block's copy was enqueued as soon as its frame arrived, before
  // the next frame: the copy overlaps the receiving.
  EXPECT_EQ(enqueued_after_frame, (std::vector<int>{1, 2, 3, 4, 5, 5}));
}

TEST_F(AgentCallDeviceTest, ResultCopiesRunAheadOfSending) {
  Make(8);
  const std::vector<uint8_t> data = Pattern(6 * kBlock);
  std::vector<int> d2h_after_response;
  std::string got = RunCopy(state_, data, 3 * kBlock, kBlock, false, nullptr, [&](int) {
    d2h_after_response.push_back(g_device->last_stream->d2h_enqueued);
  });
  EXPECT_EQ(Diff(got, data), "");
  // When the first frame is handed to gRPC, the copies of the next blocks
  // are already enqueued (four in flight).
  ASSERT_GE(d2h_after_response.size(), 2u);
  EXPECT_EQ(d2h_after_response[0], 5);
  EXPECT_EQ(d2h_after_response.back(), 6);
}

TEST_F(AgentCallDeviceTest, ByteExactWhenThePinnedPoolRunsOut) {
  Make(/*pool_blocks=*/1);
  // Odd frame sizes: blocks fill across frames and frames across blocks.
  const std::vector<uint8_t> data = Pattern(37 * kBlock + 5);
  for (int64_t frame : {int64_t{1000}, kBlock + 7, 9 * kBlock}) {
    for (int64_t out : {int64_t{0}, kBlock, 3 * kBlock}) {
      for (bool alias : {false, true}) {
        std::string got = RunCopy(state_, data, frame, out, alias);
        ASSERT_EQ(Diff(got, data), "") << "frame " << frame << " out " << out << " alias " << alias;
      }
    }
  }
}

TEST_F(AgentCallDeviceTest, StickyErrorIsReportedOnceAndTheDeviceIsNoLongerPicked) {
  Make(4);
  std::vector<std::string> reported;
  state_.SetDeviceFailureHandler(
      [&](const absl::Status& s) { reported.push_back(std::string(s.message())); });
  v1::CallHeader h;
  h.set_handler("explode");
  h.add_platforms("cpu");
  FrameEncoder enc;
  enc.AddMessageField(kHeaderField, h);
  grpc::ByteBuffer frame = enc.Finish();
  {
    AgentCall call(state_);
    ASSERT_TRUE(call.Begin(frame).ok());
    call.Admitted();
    ASSERT_TRUE(call.Allocate().ok());
    ASSERT_TRUE(call.OnRequestFrame(frame).ok());
    ASSERT_TRUE(call.EndOfInputs().ok());
    CancellationToken cancel;
    absl::Status s = call.Run(cancel);
    EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
    EXPECT_EQ(s.message(), "explode: kernel faulted");
  }
  ASSERT_EQ(reported.size(), 1u);
  EXPECT_THAT(reported[0], HasSubstr("illegal address"));
  AgentCall next(state_);
  absl::Status s = next.Begin(frame);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr("every cpu device of this agent has failed"));
  // A handler set later still hears of it, once.
  std::vector<std::string> late;
  state_.SetDeviceFailureHandler([&](const absl::Status& e) { late.push_back(""); });
  EXPECT_EQ(late.size(), 1u);
}

// Resident arrays on a device the host cannot address: a put keeps the
// device memory the bytes landed in (no chunk comes back), a chunk for a
// resident arg is refused, and a get streams the device's bytes back.
TEST_F(AgentCallDeviceTest, AResidentStaysInDeviceMemoryAndNoChunkMayNameIt) {
  Make(8);
  ResidentStore::Options o;
  o.max_bytes = int64_t{1} << 20;
  state_.residents = std::make_unique<ResidentStore>(o, state_.admission.get());
  state_.set_agent_id("test-agent");
  const std::vector<uint8_t> data = Pattern(3 * kBlock + 7);
  const int64_t n = static_cast<int64_t>(data.size());
  const TensorSpec spec{DType::kU8, {n}};
  auto header = [&](const std::string& resident, bool keep) {
    v1::CallHeader h;
    h.set_handler("copy");
    h.add_platforms("cpu");
    *h.add_args() = SpecToProto(spec);
    *h.add_results() = SpecToProto(spec);
    if (keep) {
      (*h.mutable_input_output_aliases())[0] = 0;
      h.add_keep_results(0);
    }
    if (!resident.empty()) (*h.mutable_resident_args())[0] = resident;
    return h;
  };
  auto respond = [](AgentCall& call, Collector& c) {
    for (;;) {
      grpc::ByteBuffer out;
      absl::StatusOr<bool> more = call.NextResponseFrame(kBlock, &out);
      ASSERT_TRUE(more.ok()) << more.status();
      if (!*more) break;
      ASSERT_TRUE(DecodeFrame(out, c).ok());
    }
  };

  // One call of `h` (with `chunk` bytes of data for args[0]), admitted and
  // allocated: the status of its frame, then of its run; its answer in `c`.
  auto call_once = [&](const v1::CallHeader& h, int64_t chunk, Collector& c) {
    AgentCall call(state_);
    FrameEncoder enc;
    enc.AddMessageField(kHeaderField, h);
    if (chunk > 0) enc.AddChunk(0, 0, data.data(), chunk, nullptr);
    const grpc::ByteBuffer frame = enc.Finish();
    EXPECT_TRUE(call.Begin(frame).ok());
    // The result only, never the resident's bytes again.
    EXPECT_LT(call.footprint(), n + 8192);
    EXPECT_TRUE(state_.admission->TryAcquire(call.footprint(), call.budget_tenant()));
    call.Admitted();
    EXPECT_TRUE(call.Allocate().ok());
    absl::Status s = call.OnRequestFrame(frame);
    if (!s.ok()) return s;
    EXPECT_TRUE(call.EndOfInputs().ok());
    CancellationToken cancel;
    s = call.Run(cancel);
    if (s.ok()) respond(call, c);
    return s;
  };

  Collector put;
  ASSERT_TRUE(call_once(header("", true), n, put).ok());
  EXPECT_TRUE(put.results.empty());  // its bytes stay
  const std::string handle = put.header.residents().at(0);
  EXPECT_EQ(state_.residents->bytes(), n);
  EXPECT_EQ(state_.admission->held(), n);  // in the budget, for the resident

  Collector forged;  // a chunk for the resident arg
  absl::Status s = call_once(header(handle, false), 16, forged);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("args[0], a resident array"));

  Collector get;  // the device's bytes, streamed back block by block
  ASSERT_TRUE(call_once(header(handle, false), 0, get).ok());
  EXPECT_EQ(Diff(get.results[0], data), "");
  EXPECT_TRUE(get.header.residents().empty());
}

}  // namespace
}  // namespace farcall::agent
