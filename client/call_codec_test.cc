#include "client/call_codec.h"

#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace farcall::client_internal {
namespace {

// Gathers the chunks of request frames, checking their order.
struct Gathered : FrameVisitor {
  int headers = 0;
  v1::CallHeader header;
  std::map<uint32_t, std::string> tensors;
  absl::Status OnMessageField(uint32_t field, absl::string_view bytes) override {
    if (field == kHeaderField) {
      ++headers;
      header.ParseFromString(std::string(bytes));
    }
    return absl::OkStatus();
  }
  absl::Status OnChunk(uint32_t index, uint64_t offset, const ChunkBytes& data) override {
    std::string& t = tensors[index];
    EXPECT_EQ(t.size(), offset) << "tensor " << index;
    std::string part(data.size(), '\0');
    data.CopyTo(reinterpret_cast<uint8_t*>(part.data()));
    t += part;
    return absl::OkStatus();
  }
};

CallRequest CopyOf(std::vector<uint8_t>& x, bool in_place) {
  const TensorSpec spec{DType::kU8, {static_cast<int64_t>(x.size())}};
  CallRequest req;
  req.handler = "copy";
  req.args = {in_place ? Arg::InOut(spec, x.data()) : Arg::In(spec, x.data())};
  req.results = {spec};
  if (in_place) req.aliases = {{0, 0}};
  req.attributes["alpha"] = 2.5;
  return req;
}

TEST(CallCodecTest, PrepareRefusesWhatTheServersRefuseWithTheirMessage) {
  std::vector<uint8_t> x(4);
  CallRequest req = CopyOf(x, false);
  req.platform = "TPU";
  absl::Status s = Prepare(req, {}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "`buffer_callback` not supported on TPU backend.");
  req.platform = "cpu";
  req.aliases = {{0, 3}};
  EXPECT_THAT(Prepare(req, {}).status().message(),
              ::testing::HasSubstr("input_output_aliases contains the mapping '0:3'"));
}

TEST(CallCodecTest, RequestFramesCarryTheHeaderOnceAndEveryByteInOrder) {
  std::vector<uint8_t> x(10000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<uint8_t>(i * 7);
  absl::StatusOr<PreparedCall> p = Prepare(CopyOf(x, true), {});
  ASSERT_TRUE(p.ok()) << p.status();
  RequestWriter w(*p, 4096, nullptr);
  Gathered g;
  grpc::ByteBuffer frame;
  int frames = 0;
  while (w.Next(&frame)) {
    ++frames;
    ASSERT_TRUE(DecodeFrame(frame, g).ok());
  }
  EXPECT_EQ(frames, 3);  // 4096 + 4096 + 1808 bytes
  EXPECT_EQ(g.headers, 1);
  EXPECT_EQ(g.header.handler(), "copy");
  EXPECT_EQ(g.header.platforms(0), "cpu");
  EXPECT_EQ(g.header.input_output_aliases().at(0), 0u);
  EXPECT_EQ(g.header.attributes().at("alpha").f64(), 2.5);
  ASSERT_EQ(g.tensors[0].size(), x.size());
  EXPECT_EQ(std::memcmp(g.tensors[0].data(), x.data(), x.size()), 0);
}

// A response as an agent sends it: the header, then the result's bytes.
std::vector<grpc::ByteBuffer> Response(const std::vector<uint8_t>& y, uint64_t send) {
  FrameEncoder first;
  v1::ResultHeader h;
  v1::TensorSpec* r = h.add_results();
  r->set_dtype(v1::U8);
  r->add_dims(static_cast<int64_t>(y.size()));
  h.set_agent_id("cpu-agent-1");
  h.set_platform("cpu");
  first.AddMessageField(kHeaderField, h);
  first.AddChunk(0, 0, y.data(), send / 2, nullptr);
  FrameEncoder second;
  second.AddChunk(0, send / 2, y.data() + send / 2, send - send / 2, nullptr);
  return {first.Finish(), second.Finish()};
}

TEST(CallCodecTest, AnAliasedResultLandsInTheCallersMemory) {
  std::vector<uint8_t> x(5000, 1), y(5000);
  for (size_t i = 0; i < y.size(); ++i) y[i] = static_cast<uint8_t>(i);
  absl::StatusOr<PreparedCall> p = Prepare(CopyOf(x, true), {});
  ASSERT_TRUE(p.ok());
  ResponseReader reader(*p);
  ASSERT_TRUE(reader.init_status().ok());
  for (const grpc::ByteBuffer& f : Response(y, y.size())) ASSERT_TRUE(reader.OnFrame(f).ok());
  absl::StatusOr<CallResult> r = reader.Finish();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->agent_id, "cpu-agent-1");
  EXPECT_TRUE(r->results[0].aliased);
  EXPECT_EQ(r->results[0].data, x.data());
  EXPECT_EQ(x, y);
}

TEST(CallCodecTest, AShortAnswerIsAnErrorNeverAShortResult) {
  std::vector<uint8_t> x(5000, 1), y(5000, 9);
  absl::StatusOr<PreparedCall> p = Prepare(CopyOf(x, false), {});
  ASSERT_TRUE(p.ok());
  ResponseReader reader(*p);
  for (const grpc::ByteBuffer& f : Response(y, 4000)) ASSERT_TRUE(reader.OnFrame(f).ok());
  absl::StatusOr<CallResult> r = reader.Finish();
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInternal) << r.status();
}

// What a failed call leaves: how much of an aliased arg holds the result
// (retry_policy.h), counted as chunks land, so that the call is never sent
// again from those bytes.
TEST(CallCodecTest, TheBytesOfAnAliasedResultAreCountedAsTheyLand) {
  std::vector<uint8_t> x(5000, 1), y(5000, 9);
  absl::StatusOr<PreparedCall> p = Prepare(CopyOf(x, true), {});
  ASSERT_TRUE(p.ok());
  ResponseReader reader(*p);
  EXPECT_FALSE(reader.Landed(true).has_value());  // nothing yet
  std::vector<grpc::ByteBuffer> frames = Response(y, 5000);
  ASSERT_TRUE(reader.OnFrame(frames[0]).ok());
  std::optional<LandedResult> landed = reader.Landed(true);
  ASSERT_TRUE(landed.has_value());
  EXPECT_EQ(landed->arg, 0);
  EXPECT_EQ(landed->result, 0);
  EXPECT_EQ(landed->bytes, 2500);
  EXPECT_EQ(landed->size, 5000);
  EXPECT_EQ(x[0], 9);  // written in place
  // A result that is not aliased lands in memory of its own: nothing of the
  // caller's args is lost.
  std::vector<uint8_t> z(5000, 1);
  absl::StatusOr<PreparedCall> q = Prepare(CopyOf(z, false), {});
  ASSERT_TRUE(q.ok());
  ResponseReader other(*q);
  ASSERT_TRUE(other.OnFrame(Response(y, 5000)[0]).ok());
  EXPECT_FALSE(other.Landed(true).has_value());
}

// Call ids name kept answers in agents' ledgers: 128 bits from the OS's
// random source each, never repeated.
TEST(CallCodecTest, CallIdsAre128RandomBitsInHex) {
  std::set<std::string> ids;
  for (int i = 0; i < 10000; ++i) {
    const std::string id = FreshCallId();
    ASSERT_EQ(id.size(), 32u);
    ASSERT_EQ(id.find_first_not_of("0123456789abcdef"), std::string::npos) << id;
    ids.insert(id);
  }
  EXPECT_EQ(ids.size(), 10000u);
}

// Resident arrays: a resident arg sends no bytes; the call that updates one
// goes with side effects; a result that stays comes back as its handle.
TEST(CallCodecTest, AResidentArgSendsNoBytesAndComesBackAsItself) {
  const TensorSpec spec{DType::kF32, {1024}};
  std::vector<float> x(1024, 1.0f);
  const Resident state{"res-" + std::string(32, 'a') + "-" + std::string(16, 'b') + "@cpu-1", spec,
                       "cpu"};
  CallRequest req;
  req.handler = "axpy";
  req.args = {Arg::In(spec, x.data()), Arg::Of(state)};
  req.results = {spec};
  req.aliases = {{1, 0}};
  absl::StatusOr<PreparedCall> p = Prepare(req, {});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->header.has_side_effect());  // declared pure, but it changes the agent
  EXPECT_EQ(p->header.resident_args().at(1), state.handle);
  EXPECT_EQ(p->resident_holder, "cpu-1");
  RequestWriter w(*p, 1 << 20, nullptr);
  Gathered g;
  grpc::ByteBuffer frame;
  while (w.Next(&frame)) ASSERT_TRUE(DecodeFrame(frame, g).ok());
  EXPECT_EQ(g.tensors.size(), 1u);  // x only
  EXPECT_EQ(g.tensors[0].size(), x.size() * sizeof(float));

  ResponseReader reader(*p);
  FrameEncoder answer;
  v1::ResultHeader h;
  *h.add_results() = p->header.results(0);
  (*h.mutable_residents())[0] = state.handle;
  h.set_platform("cpu");
  answer.AddMessageField(kHeaderField, h);
  ASSERT_TRUE(reader.OnFrame(answer.Finish()).ok());
  absl::StatusOr<CallResult> r = reader.Finish();
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->results[0].resident.has_value());
  EXPECT_EQ(r->results[0].resident->handle, state.handle);
  EXPECT_EQ(r->results[0].resident->agent_id(), "cpu-1");
  EXPECT_EQ(r->results[0].data, nullptr);
}

TEST(CallCodecTest, ResidentsOfTwoAgentsInOneCallAreRefusedNamingBoth) {
  const TensorSpec spec{DType::kF32, {4}};
  auto on = [&](const std::string& agent) {
    return Resident{"res-" + std::string(32, 'c') + "-" + std::string(16, 'd') + "@" + agent, spec,
                    "cpu"};
  };
  CallRequest req;
  req.handler = "add";
  req.args = {Arg::Of(on("a-1")), Arg::Of(on("b-2"))};
  req.results = {spec};
  absl::Status s = Prepare(req, {}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("'a-1'"));
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("'b-2'"));
}

}  // namespace
}  // namespace farcall::client_internal
