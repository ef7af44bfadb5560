// The conformance suite: one set of behaviours, run against a cpu agent
// directly and through the router, over both the unary Call and the streamed
// Execute RPC, and, in builds with UCX, with the tensors over UCX (on TCP,
// as between hosts: ctest sets UCX_TLS=tcp). Processes are real and bind
// ports the OS picks.
//
// Status rows are checked with the generated protobuf stubs, as an outside
// client would send them (the C++ client validates locally first); data
// paths are checked with the farcall client library.
#include <cmath>
#include <cstring>
#include <future>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/ucx_exchange.h"
#include "core/dtype.h"
#include "farcall/client.h"
#include "farcall/v1/farcall.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpc/grpc.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/process_harness.h"
#include "tests/test_platform.h"

namespace farcall {
namespace {

using ::farcall::testing::AgentArgs;
using ::farcall::testing::ChildProcess;
using ::farcall::testing::kAgentMaxCallBytes;
using ::farcall::testing::OtherPlatform;
using ::farcall::testing::SkipReason;
using ::farcall::testing::TestPlatform;
using ::farcall::testing::TestPlugin;
using ::testing::HasSubstr;

// Two cpu agents (with the example plugin) and a router over both.
struct Cluster {
  std::unique_ptr<ChildProcess> agent_a, agent_b, router;
};

Cluster* g_cluster = nullptr;

class ClusterEnv : public ::testing::Environment {
 public:
  void SetUp() override {
    g_cluster = new Cluster;
    if (!SkipReason().empty()) {
      std::fprintf(stderr, "SKIPPED: no %s device here: %s\n", TestPlatform().c_str(),
                   SkipReason().c_str());
      return;
    }
    auto a = ChildProcess::Start(FARCALL_AGENT_BIN, AgentArgs());
    ASSERT_TRUE(a.ok()) << a.status();
    auto b = ChildProcess::Start(FARCALL_AGENT_BIN, AgentArgs());
    ASSERT_TRUE(b.ok()) << b.status();
    g_cluster->agent_a = *std::move(a);
    g_cluster->agent_b = *std::move(b);
    auto r = ChildProcess::Start(
        FARCALL_ROUTER_BIN,
        {"--listen=127.0.0.1:0", absl::StrCat("--agents=", g_cluster->agent_a->address(), ",",
                                              g_cluster->agent_b->address())});
    ASSERT_TRUE(r.ok()) << r.status();
    g_cluster->router = *std::move(r);
  }
  void TearDown() override { delete g_cluster; }
};

enum class Target { kAgent, kRouter };

struct Param {
  Target target;
  Rpc rpc;
  Transport transport = Transport::kAuto;
};

std::string ParamName(const ::testing::TestParamInfo<Param>& p) {
  return absl::StrCat(p.param.target == Target::kAgent ? "Agent" : "Router",
                      p.param.rpc == Rpc::kUnary ? "Call" : "Execute",
                      p.param.transport == Transport::kUcx   ? "Ucx"
                      : p.param.transport == Transport::kShm ? "Shm"
                                                             : "");
}

// Every path; UCX carries unary calls, directly or named by the router. Shared memory carries calls
// of every platform's agents on this host (a device agent copies the tensors between the client's
// region and device memory).
std::vector<Param> AllPaths() {
  std::vector<Param> v = {{Target::kAgent, Rpc::kUnary},
                          {Target::kAgent, Rpc::kStream},
                          {Target::kRouter, Rpc::kUnary},
                          {Target::kRouter, Rpc::kStream},
                          {Target::kAgent, Rpc::kUnary, Transport::kShm},
                          {Target::kRouter, Rpc::kUnary, Transport::kShm}};
  // Device agents take UCX pieces into host memory and copy them to the
  // device (cuda and rocm rows skip here without a device; oneapi runs on
  // PoCL).
  if (client_internal::UcxBuiltIn()) {
    v.push_back({Target::kAgent, Rpc::kUnary, Transport::kUcx});
    v.push_back({Target::kRouter, Rpc::kUnary, Transport::kUcx});
  }
  return v;
}

v1::TensorSpec Spec(DType d, std::vector<int64_t> dims) {
  v1::TensorSpec s;
  s.set_dtype(static_cast<v1::DType>(d));
  for (int64_t x : dims) s.add_dims(x);
  return s;
}

// A header for copy of one float32[n] arg.
v1::CallHeader CopyHeader(int64_t n, const std::string& platform = TestPlatform()) {
  v1::CallHeader h;
  h.set_handler("copy");
  h.add_platforms(platform);
  *h.add_args() = Spec(DType::kF32, {n});
  *h.add_results() = Spec(DType::kF32, {n});
  return h;
}

void AddChunk(v1::ExecuteRequest* r, uint32_t index, uint64_t offset, size_t size, char fill = 1) {
  v1::Chunk* c = r->add_chunks();
  c->set_index(index);
  c->set_offset(offset);
  c->set_data(std::string(size, fill));
}

struct RawAnswer {
  grpc::Status status;
  std::vector<v1::ExecuteResponse> responses;
};

class ConformanceTest : public ::testing::TestWithParam<Param> {
 protected:
  std::string address() const {
    return GetParam().target == Target::kAgent ? g_cluster->agent_a->address()
                                               : g_cluster->router->address();
  }
  bool via_router() const { return GetParam().target == Target::kRouter; }
  bool unary() const { return GetParam().rpc == Rpc::kUnary; }
  bool ucx() const { return GetParam().transport == Transport::kUcx; }
  // A UCX or shared-memory row's calls went that way (not over gRPC by a
  // quiet fallback).
  void ExpectTransport(const CallResult& r) const {
    if (GetParam().transport != Transport::kAuto) {
      EXPECT_EQ(r.transport, GetParam().transport);
    }
  }

  std::shared_ptr<grpc::Channel> Channel() {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(-1);
    return grpc::CreateCustomChannel(address(), grpc::InsecureChannelCredentials(), args);
  }

  // Sends `msgs` as an outside protobuf client would. Unary sends only
  // msgs[0] (tests that need several messages use Execute).
  RawAnswer Raw(const std::vector<v1::ExecuteRequest>& msgs, bool force_stream = false,
                int deadline_ms = 20000) {
    auto channel = Channel();
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(deadline_ms));
    RawAnswer a;
    if (unary() && !force_stream) {
      v1::ExecuteResponse resp;
      if (via_router()) {
        a.status = v1::Router::NewStub(channel)->Call(&ctx, msgs[0], &resp);
      } else {
        a.status = v1::Agent::NewStub(channel)->Call(&ctx, msgs[0], &resp);
      }
      if (a.status.ok()) a.responses.push_back(resp);
      return a;
    }
    std::unique_ptr<grpc::ClientReaderWriter<v1::ExecuteRequest, v1::ExecuteResponse>> s;
    std::unique_ptr<v1::Router::Stub> rs;
    std::unique_ptr<v1::Agent::Stub> as;
    if (via_router()) {
      rs = v1::Router::NewStub(channel);
      s = rs->Execute(&ctx);
    } else {
      as = v1::Agent::NewStub(channel);
      s = as->Execute(&ctx);
    }
    for (const auto& m : msgs) {
      if (!s->Write(m)) break;
    }
    s->WritesDone();
    v1::ExecuteResponse resp;
    while (s->Read(&resp)) a.responses.push_back(resp);
    a.status = s->Finish();
    return a;
  }

  RawAnswer RawHeaderOnly(const v1::CallHeader& h) {
    v1::ExecuteRequest r;
    *r.mutable_header() = h;
    return Raw({r});
  }

  void ExpectStatus(const RawAnswer& a, grpc::StatusCode code, const std::string& msg) {
    EXPECT_EQ(a.status.error_code(), code) << a.status.error_message();
    EXPECT_EQ(a.status.error_message(), msg);
  }
  void ExpectStatusHas(const RawAnswer& a, grpc::StatusCode code, const std::string& part) {
    EXPECT_EQ(a.status.error_code(), code) << a.status.error_message();
    EXPECT_THAT(a.status.error_message(), HasSubstr(part));
  }

  std::unique_ptr<Client> NewClient() {
    auto c = Client::Connect(address());
    EXPECT_TRUE(c.ok());
    return *std::move(c);
  }
  CallOptions Opts() const {
    CallOptions o;
    o.rpc = GetParam().rpc;
    o.transport = GetParam().transport;
    return o;
  }

  // A good call on the same path: errors must leave nothing broken behind.
  void ExpectGoodCallAfter() {
    v1::ExecuteRequest r;
    *r.mutable_header() = CopyHeader(4);
    AddChunk(&r, 0, 0, 16, 7);
    RawAnswer a = Raw({r});
    ASSERT_TRUE(a.status.ok()) << a.status.error_message();
    std::string got;
    for (const auto& resp : a.responses)
      for (const auto& c : resp.chunks()) got += c.data();
    EXPECT_EQ(got, std::string(16, 7));
  }

  void SetUp() override { SKIP_WITHOUT_DEVICE(); }
  void TearDown() override {
    if (!IsSkipped()) ExpectGoodCallAfter();
  }
};

// ---- Status table rows ------------------------------------------------------

TEST_P(ConformanceTest, UnsupportedPlatformIsJaxError) {
  ExpectStatus(RawHeaderOnly(CopyHeader(4, "tpu")), grpc::StatusCode::INVALID_ARGUMENT,
               "`buffer_callback` not supported on tpu backend.");
  ExpectStatus(RawHeaderOnly(CopyHeader(4, "METAL")), grpc::StatusCode::INVALID_ARGUMENT,
               "`buffer_callback` not supported on METAL backend.");
}

TEST_P(ConformanceTest, MultiplePlatformsUnimplemented) {
  v1::CallHeader h = CopyHeader(4);
  h.add_platforms(OtherPlatform());
  ExpectStatus(RawHeaderOnly(h), grpc::StatusCode::UNIMPLEMENTED,
               "multi-platform lowering for buffer_callback");
}

TEST_P(ConformanceTest, NoPlatform) {
  v1::CallHeader h = CopyHeader(4);
  h.clear_platforms();
  ExpectStatusHas(RawHeaderOnly(h), grpc::StatusCode::INVALID_ARGUMENT, "exactly one platform");
}

TEST_P(ConformanceTest, AliasInputOutOfRange) {
  v1::CallHeader h = CopyHeader(4);
  (*h.mutable_input_output_aliases())[2] = 0;
  ExpectStatus(RawHeaderOnly(h), grpc::StatusCode::INVALID_ARGUMENT,
               "input_output_aliases contains the mapping '2:0' with input index 2 "
               "outside the range [0, 1).");
}

TEST_P(ConformanceTest, AliasOutputOutOfRange) {
  v1::CallHeader h = CopyHeader(4);
  (*h.mutable_input_output_aliases())[0] = 3;
  ExpectStatus(RawHeaderOnly(h), grpc::StatusCode::INVALID_ARGUMENT,
               "input_output_aliases contains the mapping '0:3' with output index 3 "
               "outside the range [0, 1).");
}

TEST_P(ConformanceTest, AliasSpecsDiffer) {
  v1::CallHeader h;
  h.set_handler("copy");
  h.add_platforms(TestPlatform());
  *h.add_args() = Spec(DType::kF32, {4, 8});
  *h.add_results() = Spec(DType::kF32, {8, 4});
  (*h.mutable_input_output_aliases())[0] = 0;
  ExpectStatus(RawHeaderOnly(h), grpc::StatusCode::INVALID_ARGUMENT,
               "input_output_aliases contains the mapping '0:0' referring to an input "
               "with abstract value float32[4,8] and an output with a "
               "different abstract value float32[8,4].");
}

TEST_P(ConformanceTest, TwoInputsAliasedToOneOutput) {
  v1::CallHeader h = CopyHeader(4);
  *h.add_args() = Spec(DType::kF32, {4});
  (*h.mutable_input_output_aliases())[0] = 0;
  (*h.mutable_input_output_aliases())[1] = 0;
  ExpectStatusHas(RawHeaderOnly(h), grpc::StatusCode::INVALID_ARGUMENT,
                  "maps inputs 0 and 1 to the same output 0");
}

TEST_P(ConformanceTest, NegativeDim) {
  v1::CallHeader h = CopyHeader(4);
  *h.mutable_args(0) = Spec(DType::kF32, {2, -3});
  ExpectStatusHas(RawHeaderOnly(h), grpc::StatusCode::INVALID_ARGUMENT,
                  "args[0] has negative dim -3 at index 1");
}

TEST_P(ConformanceTest, ByteSizeOverflow) {
  v1::CallHeader h = CopyHeader(4);
  *h.mutable_results(0) = Spec(DType::kF64, {int64_t{1} << 40, int64_t{1} << 40});
  ExpectStatusHas(RawHeaderOnly(h), grpc::StatusCode::INVALID_ARGUMENT, "overflows int64");
}

TEST_P(ConformanceTest, UnknownDType) {
  v1::CallHeader h = CopyHeader(4);
  h.mutable_args(0)->set_dtype(static_cast<v1::DType>(77));
  ExpectStatusHas(RawHeaderOnly(h), grpc::StatusCode::INVALID_ARGUMENT,
                  "args[0] has unknown dtype 77");
}

TEST_P(ConformanceTest, ChunkUnknownIndex) {
  v1::ExecuteRequest r;
  *r.mutable_header() = CopyHeader(4);
  AddChunk(&r, 5, 0, 16);
  ExpectStatusHas(Raw({r}), grpc::StatusCode::INVALID_ARGUMENT, "args[5] at offset 0");
}

TEST_P(ConformanceTest, ChunkGap) {
  v1::ExecuteRequest r;
  *r.mutable_header() = CopyHeader(4);
  AddChunk(&r, 0, 0, 4);
  AddChunk(&r, 0, 8, 8);
  ExpectStatusHas(Raw({r}), grpc::StatusCode::INVALID_ARGUMENT,
                  "chunk at offset 8 leaves a gap; bytes [4, 8) were never sent");
}

TEST_P(ConformanceTest, ChunkOverlap) {
  v1::ExecuteRequest r;
  *r.mutable_header() = CopyHeader(4);
  AddChunk(&r, 0, 0, 8);
  AddChunk(&r, 0, 4, 8);
  ExpectStatusHas(Raw({r}), grpc::StatusCode::INVALID_ARGUMENT,
                  "chunk at offset 4 overlaps bytes already received [0, 8)");
}

TEST_P(ConformanceTest, ChunkPastEnd) {
  v1::ExecuteRequest r;
  *r.mutable_header() = CopyHeader(4);
  AddChunk(&r, 0, 0, 20);
  ExpectStatusHas(Raw({r}), grpc::StatusCode::INVALID_ARGUMENT,
                  "chunk [0, 20) runs past the end of the tensor at 16");
}

TEST_P(ConformanceTest, DataMissingAtHalfClose) {
  v1::ExecuteRequest r;
  *r.mutable_header() = CopyHeader(4);
  AddChunk(&r, 0, 0, 8);
  ExpectStatusHas(Raw({r}), grpc::StatusCode::INVALID_ARGUMENT,
                  "args[0] (float32[4], 16 bytes): data missing at half-close; "
                  "received [0, 8) of [0, 16)");
}

TEST_P(ConformanceTest, HeaderOnlyInFirstMessage) {
  v1::ExecuteRequest first, second;
  *first.mutable_header() = CopyHeader(4);
  AddChunk(&first, 0, 0, 8);
  *second.mutable_header() = CopyHeader(4);
  AddChunk(&second, 0, 8, 8);
  ExpectStatusHas(Raw({first, second}, /*force_stream=*/true), grpc::StatusCode::INVALID_ARGUMENT,
                  "only the first message may");
}

TEST_P(ConformanceTest, FirstMessageWithoutHeader) {
  v1::ExecuteRequest empty, second;
  *second.mutable_header() = CopyHeader(4);
  ExpectStatus(Raw({empty, second}, /*force_stream=*/true), grpc::StatusCode::INVALID_ARGUMENT,
               "the first request message must carry the call header.");
}

TEST_P(ConformanceTest, AMillionTensorHeaderIsRefusedAtOnceAndCostsNoMemory) {
  v1::ExecuteRequest r;
  v1::CallHeader* h = r.mutable_header();
  h->set_handler("copy");
  h->add_platforms(TestPlatform());
  for (int i = 0; i < 1000000; ++i) *h->add_args() = Spec(DType::kF32, {0});
  std::vector<ChildProcess*> procs = {g_cluster->agent_a.get()};
  if (via_router()) procs.push_back(g_cluster->router.get());
  std::vector<int64_t> before;
  for (ChildProcess* p : procs) before.push_back(p->ResidentBytes());
  RawAnswer a = Raw({r});
  ExpectStatus(a, grpc::StatusCode::RESOURCE_EXHAUSTED,
               absl::StrCat("the call header is ", h->ByteSizeLong(),
                            " bytes, over the limit of 1048576 (--max_header_bytes)."));
  for (size_t i = 0; i < procs.size(); ++i) {
    const int64_t grown = procs[i]->ResidentBytes() - before[i];
    std::fprintf(stderr, "resident memory grew by %.1f MiB\n", grown / 1048576.0);
    EXPECT_LT(grown, int64_t{32} << 20) << "process " << i;  // was 0.4-1.6 GiB
  }
}

TEST_P(ConformanceTest, TooManyTensorsOrTooHighARankAreRefused) {
  v1::CallHeader h;
  h.set_handler("copy");
  h.add_platforms(TestPlatform());
  for (int i = 0; i < 1025; ++i) *h.add_args() = Spec(DType::kF32, {0});
  ExpectStatus(RawHeaderOnly(h), grpc::StatusCode::RESOURCE_EXHAUSTED,
               "the call header declares more tensors (args plus results), over the limit "
               "of 1024 (--max_tensors).");
  v1::CallHeader deep = CopyHeader(1);
  deep.mutable_args(0)->clear_dims();
  for (int d = 0; d < 65; ++d) deep.mutable_args(0)->add_dims(1);
  ExpectStatus(RawHeaderOnly(deep), grpc::StatusCode::RESOURCE_EXHAUSTED,
               "args[0] has rank 65, over the limit of 64 (--max_rank).");
}

TEST_P(ConformanceTest, CallOverByteLimit) {
  v1::CallHeader h = CopyHeader(kAgentMaxCallBytes / 4);  // args + result = 2x
  ExpectStatusHas(RawHeaderOnly(h), grpc::StatusCode::RESOURCE_EXHAUSTED,
                  absl::StrCat("limit of ", kAgentMaxCallBytes, " bytes"));
}

TEST_P(ConformanceTest, HandlerNotRegistered) {
  v1::CallHeader h = CopyHeader(4);
  h.set_handler("no_such_handler");
  RawAnswer a = RawHeaderOnly(h);
  // The contract's sentence, then the handlers the platform has (the same
  // from the agent and through the router: both agents have the same).
  ExpectStatusHas(a, grpc::StatusCode::NOT_FOUND,
                  absl::StrCat("handler 'no_such_handler' is not registered for platform '",
                               TestPlatform(), "'. Registered there: "));
  EXPECT_THAT(a.status.error_message(), HasSubstr(", copy, "));
  EXPECT_EQ(a.status.error_message().back(), '.');
}

TEST_P(ConformanceTest, GpuMeansCudaOrRocm) {
  // JAX's "gpu": whichever GPU platform has agents; any case.
  if (TestPlatform() == "cuda" || TestPlatform() == "rocm") {
    auto client = NewClient();
    std::vector<float> x = {1, 2, 3, 4};
    CallRequest req;
    req.platform = "GPU";
    req.handler = "copy";
    req.args = {Arg::In(TensorSpec{DType::kF32, {4}}, x.data())};
    req.results = {TensorSpec{DType::kF32, {4}}};
    absl::StatusOr<CallResult> r = client->Call(req, Opts());
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->results[0].as<float>()[3], 4.0f);
    return;
  }
  RawAnswer a = RawHeaderOnly(CopyHeader(4, "GPU"));
  if (via_router()) {
    ExpectStatus(a, grpc::StatusCode::UNAVAILABLE, "no live agent serves platform 'gpu'.");
  } else {
    ExpectStatus(a, grpc::StatusCode::FAILED_PRECONDITION,
                 absl::StrCat("this agent serves platform '", TestPlatform(),
                              "', but the call asks for platform 'gpu'."));
  }
}

TEST_P(ConformanceTest, SupportedPlatformNotServed) {
  // Upper case: platform names are matched in any case, as in JAX.
  RawAnswer a = RawHeaderOnly(CopyHeader(4, absl::AsciiStrToUpper(OtherPlatform())));
  if (via_router()) {
    ExpectStatus(a, grpc::StatusCode::UNAVAILABLE,
                 absl::StrCat("no live agent serves platform '", OtherPlatform(), "'."));
  } else {
    ExpectStatus(a, grpc::StatusCode::FAILED_PRECONDITION,
                 absl::StrCat("this agent serves platform '", TestPlatform(),
                              "', but the call asks for platform '", OtherPlatform(), "'."));
  }
}

TEST_P(ConformanceTest, HandlerFailureKeepsItsCodeAndMessage) {
  v1::CallHeader h;
  h.set_handler("fail");
  h.add_platforms(TestPlatform());
  (*h.mutable_attributes())["code"].set_i64(7);
  (*h.mutable_attributes())["message"].set_str("no entry for you");
  ExpectStatus(RawHeaderOnly(h), grpc::StatusCode::PERMISSION_DENIED, "no entry for you");
  // UNAVAILABLE from a handler is the handler's answer: the router must not
  // retry it elsewhere or mark the agent down.
  (*h.mutable_attributes())["code"].set_i64(14);
  ExpectStatus(RawHeaderOnly(h), grpc::StatusCode::UNAVAILABLE, "no entry for you");
}

TEST_P(ConformanceTest, DeadlineStopsSleep) {
  v1::ExecuteRequest r;
  r.mutable_header()->set_handler("sleep");
  r.mutable_header()->add_platforms(TestPlatform());
  (*r.mutable_header()->mutable_attributes())["ms"].set_i64(60000);
  auto start = std::chrono::steady_clock::now();
  RawAnswer a = Raw({r}, false, /*deadline_ms=*/300);
  EXPECT_EQ(a.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  // The handler was told to stop: a worker is free again for the next call
  // (TearDown's good call) and the answer came long before 60 s.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  if (via_router()) {
    // A deadline says nothing about the agents: none was marked down.
    auto list = (*Client::Connect(address()))->ListAgents(/*refresh=*/false);
    ASSERT_TRUE(list.ok());
    for (const AgentStatus& e : *list) {
      EXPECT_EQ(e.health, AgentStatus::Health::kServing) << e.address << ": " << e.last_error;
    }
  }
}

// ---- Data path through the client library ---------------------------------

TEST_P(ConformanceTest, RoundTripEveryDType) {
  auto client = NewClient();
  std::mt19937 rng(42);
  for (DType d : AllDTypes()) {
    TensorSpec spec{d, {3, 5}};
    std::vector<uint8_t> in(15 * ItemSize(d));
    for (auto& b : in) b = static_cast<uint8_t>(rng());
    if (d == DType::kPred)
      for (auto& b : in) b &= 1;
    CallRequest req;
    req.platform = TestPlatform();
    req.handler = "copy";
    req.args = {Arg::In(spec, in.data())};
    req.results = {spec};
    absl::StatusOr<CallResult> r = client->Call(req, Opts());
    ASSERT_TRUE(r.ok()) << DTypeName(d) << ": " << r.status();
    ASSERT_EQ(r->results.size(), 1u);
    EXPECT_EQ(r->results[0].spec, spec);
    EXPECT_EQ(std::memcmp(r->results[0].data, in.data(), in.size()), 0) << DTypeName(d);
    EXPECT_EQ(r->rpc, GetParam().rpc);
    EXPECT_EQ(r->platform, TestPlatform());
    ExpectTransport(*r);
  }
}

TEST_P(ConformanceTest, AxpyUpdatesYInPlace) {
  auto client = NewClient();
  TensorSpec spec{DType::kF32, {16}};
  std::vector<float> x(16), y(16);
  for (int i = 0; i < 16; ++i) {
    x[i] = i;
    y[i] = 100 + i;
  }
  CallRequest req;
  req.platform = TestPlatform();
  req.handler = "axpy";
  req.args = {Arg::In(spec, x.data()), Arg::InOut(spec, y.data())};
  req.results = {spec};
  req.aliases = {{1, 0}};
  req.attributes["alpha"] = 2.0;
  absl::StatusOr<CallResult> r = client->Call(req, Opts());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->results[0].aliased);
  EXPECT_EQ(r->results[0].data, reinterpret_cast<uint8_t*>(y.data()));
  for (int i = 0; i < 16; ++i) EXPECT_EQ(y[i], 2 * i + 100 + i);
}

// Sums over many elements: on devices they reduce in two stages, in an
// order fixed by the element count, so a sum is exact where the values
// allow and the same on every run.
TEST_P(ConformanceTest, SumsAreExactAndTheSameEveryRun) {
  auto client = NewClient();
  auto sum = [&](DType d, int64_t n, const void* x, TensorSpec result, void* out) {
    CallRequest req;
    req.platform = TestPlatform();
    req.handler = "sum";
    req.args = {Arg::In(TensorSpec{d, {n}}, x)};
    req.results = {result};
    absl::StatusOr<CallResult> r = client->Call(req, Opts());
    EXPECT_TRUE(r.ok()) << r.status();
    if (r.ok()) std::memcpy(out, r->results[0].data, static_cast<size_t>(r->results[0].size));
  };
  constexpr int64_t kN = 1000003;  // many groups of the first stage, and a ragged end
  std::vector<float> f(kN);
  double exact = 0;
  for (int64_t i = 0; i < kN; ++i) exact += f[i] = static_cast<float>(i % 7);
  float got = -1;
  sum(DType::kF32, kN, f.data(), TensorSpec{DType::kF32, {}}, &got);
  EXPECT_EQ(got, static_cast<float>(exact));
  // Values whose sum depends on the order: the same bits on each run.
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> mixed(-1e6f, 1e6f);
  double reference = 0;
  for (float& v : f) reference += v = mixed(rng) * (rng() % 2 ? 1e-6f : 1.0f);
  float first = 0;
  sum(DType::kF32, kN, f.data(), TensorSpec{DType::kF32, {}}, &first);
  EXPECT_NEAR(first, reference, 1e-3 * std::abs(reference) + 1);
  for (int run = 0; run < 3; ++run) {
    float again = 0;
    sum(DType::kF32, kN, f.data(), TensorSpec{DType::kF32, {}}, &again);
    EXPECT_EQ(std::memcmp(&again, &first, sizeof(float)), 0) << again << " vs " << first;
  }
  // Integers wrap as their type does; complex numbers sum each part.
  std::vector<uint8_t> bytes(kN, 255);
  uint8_t byte_sum = 0;
  sum(DType::kU8, kN, bytes.data(), TensorSpec{DType::kU8, {}}, &byte_sum);
  EXPECT_EQ(byte_sum, static_cast<uint8_t>(255 * kN));
  std::vector<float> c(2 * kN);
  for (int64_t i = 0; i < kN; ++i) {
    c[2 * i] = 1;
    c[2 * i + 1] = 2;
  }
  float complex_sum[2] = {0, 0};
  sum(DType::kC64, kN, c.data(), TensorSpec{DType::kC64, {}}, complex_sum);
  EXPECT_EQ(complex_sum[0], static_cast<float>(kN));
  EXPECT_EQ(complex_sum[1], static_cast<float>(2 * kN));
}

TEST_P(ConformanceTest, PluginHandlerRuns) {
  if (TestPlugin().empty()) {
    GTEST_SKIP() << "no example plugin is built for platform " << TestPlatform()
                 << " (set FARCALL_TEST_PLUGIN)";
  }
  auto client = NewClient();
  TensorSpec spec{DType::kF32, {3}};
  std::vector<float> x = {1, -2, 3};
  CallRequest req;
  req.platform = TestPlatform();
  req.handler = "example.negate";
  req.args = {Arg::In(spec, x.data())};
  req.results = {spec};
  absl::StatusOr<CallResult> r = client->Call(req, Opts());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->results[0].as<float>()[1], 2.0f);
}

TEST_P(ConformanceTest, LargeAliasedCopy) {
  if (unary() && GetParam().transport == Transport::kAuto) {
    GTEST_SKIP() << "256 MiB does not fit one unary message; Execute covers it";
  }
  auto client = NewClient();
  const int64_t n = (int64_t{256} << 20) + 13;
  TensorSpec spec{DType::kU8, {n}};
  std::vector<uint8_t> buf(n);
  for (int64_t i = 0; i < n; ++i) buf[i] = static_cast<uint8_t>(i * 131 + (i >> 20));
  std::vector<uint8_t> expected = buf;
  CallRequest req;
  req.platform = TestPlatform();
  req.handler = "copy";
  req.args = {Arg::InOut(spec, buf.data())};
  req.results = {spec};
  req.aliases = {{0, 0}};
  absl::StatusOr<CallResult> r = client->Call(req, Opts());
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectTransport(*r);
  EXPECT_TRUE(r->results[0].aliased);
  EXPECT_EQ(r->results[0].size, n);
  EXPECT_TRUE(buf == expected);
}

TEST_P(ConformanceTest, SixtyFourConcurrentCalls) {
  auto client = NewClient();
  constexpr int kCalls = 64, kN = 1024;
  TensorSpec spec{DType::kS32, {kN}};
  std::vector<std::vector<int32_t>> a(kCalls, std::vector<int32_t>(kN));
  std::vector<std::vector<int32_t>> b(kCalls, std::vector<int32_t>(kN));
  std::vector<std::future<absl::StatusOr<CallResult>>> futures;
  for (int c = 0; c < kCalls; ++c) {
    for (int i = 0; i < kN; ++i) {
      a[c][i] = c * 1000 + i;
      b[c][i] = -i;
    }
    CallRequest req;
    req.platform = TestPlatform();
    req.handler = "add";
    req.args = {Arg::In(spec, a[c].data()), Arg::In(spec, b[c].data())};
    req.results = {spec};
    futures.push_back(client->CallFuture(req, Opts()));
  }
  for (int c = 0; c < kCalls; ++c) {
    absl::StatusOr<CallResult> r = futures[c].get();
    ASSERT_TRUE(r.ok()) << r.status();
    const int32_t* out = r->results[0].as<int32_t>();
    for (int i = 0; i < kN; i += 97) ASSERT_EQ(out[i], c * 1000) << "call " << c;
  }
}

TEST_P(ConformanceTest, ClientValidatesLikeTheServers) {
  auto client = NewClient();
  CallRequest req;
  req.platform = TestPlatform();
  req.handler = "copy";
  req.platform = "tpu";
  absl::StatusOr<CallResult> r = client->Call(req, Opts());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "`buffer_callback` not supported on tpu backend.");
}

TEST_P(ConformanceTest, ResultsLandInCallerMemory) {
  auto client = NewClient();
  TensorSpec spec{DType::kS32, {3000}};  // several chunks on Execute
  std::vector<int32_t> x(3000), sum_out(1, -1), copy_out(3000, -1);
  for (int i = 0; i < 3000; ++i) x[i] = i;
  CallRequest req;
  req.platform = TestPlatform();
  req.handler = "copy";
  req.args = {Arg::In(spec, x.data())};
  req.results = {spec};
  req.result_memory = {copy_out.data()};
  CallOptions opts = Opts();
  opts.chunk_bytes = 4096;
  absl::StatusOr<CallResult> r = client->Call(req, opts);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->results[0].data, reinterpret_cast<uint8_t*>(copy_out.data()));
  EXPECT_EQ(r->results[0].storage, nullptr);
  EXPECT_EQ(copy_out, x);
  req.result_memory = {nullptr, nullptr};  // not one per result
  EXPECT_EQ(client->Call(req, opts).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_P(ConformanceTest, UncheckedCallsGetTheServersAnswer) {
  auto client = NewClient();
  TensorSpec a{DType::kF32, {4}}, b{DType::kBF16, {4}};
  std::vector<float> x(4);
  CallRequest req;
  req.handler = "copy";
  req.platforms = {TestPlatform(), OtherPlatform()};
  req.args = {Arg::InOut(a, x.data())};
  req.results = {b};
  req.aliases = {{0, 0}};
  CallOptions opts = Opts();
  opts.validate_locally = false;
  // Unchecked calls to a router go through it, and it carries their tensors
  // itself: UCX reaches only agents called directly.
  if (via_router()) opts.transport = Transport::kAuto;
  absl::StatusOr<CallResult> r = client->Call(req, opts);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(r.status().message(), "multi-platform lowering for buffer_callback");
  req.platforms = {TestPlatform()};
  r = client->Call(req, opts);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            "input_output_aliases contains the mapping '0:0' referring to an input with "
            "abstract value float32[4] and an output with a different abstract value "
            "bfloat16[4].");
}

INSTANTIATE_TEST_SUITE_P(AllPaths, ConformanceTest, ::testing::ValuesIn(AllPaths()), ParamName);

}  // namespace
}  // namespace farcall

int main(int argc, char** argv) {
  // gRPC stays initialised for the whole run (see client.cc for why).
  grpc_init();
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::AddGlobalTestEnvironment(new farcall::ClusterEnv);
  return RUN_ALL_TESTS();
}
