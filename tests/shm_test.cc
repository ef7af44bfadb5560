// Same-host shared memory: a client beside its agent stages tensors in a
// memfd region it passed over the agent's Unix socket; only the header
// crosses gRPC. Real agent and router processes on loopback.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/shm_channel.h"
#include "client/ucx_exchange.h"
#include "core/shm_protocol.h"
#include "farcall/client.h"
#include "farcall/v1/farcall.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpc/grpc.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/process_harness.h"
#include "tests/test_calls.h"

namespace farcall {
namespace {

using ::farcall::testing::ChildProcess;
using ::testing::HasSubstr;

class ShmTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto procs = testing::StartAgentAndRouter(FARCALL_AGENT_BIN, FARCALL_ROUTER_BIN);
    ASSERT_TRUE(procs.ok()) << procs.status();
    procs_ = procs->release();
    agent_ = procs_->agent.get();
    router_ = procs_->router.get();
  }
  static void TearDownTestSuite() { delete procs_; }

  static std::unique_ptr<Client> AgentClient() { return *Client::Connect(agent_->address()); }
  static AgentDescription Describe() { return *AgentClient()->Describe(); }

 public:
  static testing::AgentAndRouter* procs_;
  static ChildProcess* agent_;
  static ChildProcess* router_;
};
testing::AgentAndRouter* ShmTest::procs_ = nullptr;
ChildProcess* ShmTest::agent_ = nullptr;
ChildProcess* ShmTest::router_ = nullptr;

CallRequest CopyRequest(const TensorSpec& spec, const void* data) {
  CallRequest req;
  req.handler = "copy";
  req.args = {Arg::In(spec, data)};
  req.results = {spec};
  return req;
}

TEST_F(ShmTest, AgentOffersASocket) {
  EXPECT_THAT(Describe().shm_socket, HasSubstr("@farcall-agent-"));
}

TEST_F(ShmTest, LocalAgentCallsUseSharedMemoryByteExact) {
  auto client = AgentClient();
  const int64_t n = (int64_t{64} << 20) + 3;
  TensorSpec spec{DType::kU8, {n}};
  std::vector<uint8_t> in(n);
  for (int64_t i = 0; i < n; ++i) in[i] = static_cast<uint8_t>(i * 37 + (i >> 16));
  auto r = client->Call(CopyRequest(spec, in.data()));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->transport, Transport::kShm);
  ASSERT_EQ(r->results[0].size, n);
  EXPECT_EQ(std::memcmp(r->results[0].data, in.data(), n), 0);
  EXPECT_NE(r->results[0].keepalive, nullptr);  // read straight from the region
}

TEST_F(ShmTest, SmallResultsOfLargeCallsAreCopiedOutOfTheRegion) {
  auto client = AgentClient();
  const int64_t n = int64_t{8} << 20;
  std::vector<uint8_t> in(n, 1);
  CallRequest req;
  req.handler = "sum";
  req.args = {Arg::In(TensorSpec{DType::kU8, {n}}, in.data())};
  req.results = {TensorSpec{DType::kU8, {}}};
  auto r = client->Call(req);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->transport, Transport::kShm);
  EXPECT_EQ(r->results[0].keepalive, nullptr);  // the region went back to the pool
  ASSERT_NE(r->results[0].storage, nullptr);
  EXPECT_EQ(r->results[0].data[0], static_cast<uint8_t>(n));  // sum wraps in uint8
}

// Below CallOptions::shm_min_bytes (64 KiB of args and results), kAuto
// keeps a same-host call on gRPC, which is as fast or faster for it;
// from there on it takes shared memory.
TEST_F(ShmTest, AutoKeepsSmallCallsOnGrpcAndLargeOnesOnSharedMemory) {
  auto client = AgentClient();
  std::vector<uint8_t> in(32 << 10, 5);
  // One byte under the bar, with its result: gRPC.
  auto r = client->Call(CopyRequest(TensorSpec{DType::kU8, {(32 << 10) - 1}}, in.data()));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->transport, Transport::kGrpc);
  EXPECT_EQ(r->results[0].data[100], 5);
  // At the bar: shared memory.
  r = client->Call(CopyRequest(TensorSpec{DType::kU8, {32 << 10}}, in.data()));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->transport, Transport::kShm);
  CallOptions higher;
  higher.shm_min_bytes = 1 << 20;
  r = client->Call(CopyRequest(TensorSpec{DType::kU8, {32 << 10}}, in.data()), higher);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->transport, Transport::kGrpc);
}

TEST_F(ShmTest, AliasedResultIsWrittenBackInPlace) {
  auto client = AgentClient();
  TensorSpec spec{DType::kF32, {1000}};
  std::vector<float> x(1000), y(1000);
  for (int i = 0; i < 1000; ++i) {
    x[i] = i;
    y[i] = 1;
  }
  CallRequest req;
  req.handler = "axpy";
  req.args = {Arg::In(spec, x.data()), Arg::InOut(spec, y.data())};
  req.results = {spec};
  req.aliases = {{1, 0}};
  req.attributes["alpha"] = 3.0;
  auto r = client->Call(req, testing::SharedMemoryAtAnySize());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->transport, Transport::kShm);
  EXPECT_EQ(r->results[0].data, reinterpret_cast<uint8_t*>(y.data()));
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(y[i], 3.0f * i + 1) << i;
}

TEST_F(ShmTest, AsyncCallsUseItToo) {
  auto client = AgentClient();
  TensorSpec spec{DType::kS32, {4}};
  std::vector<int32_t> x = {1, 2, 3, 4};
  auto f = client->CallFuture(CopyRequest(spec, x.data()), testing::SharedMemoryAtAnySize());
  auto r = f.get();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->transport, Transport::kShm);
  EXPECT_EQ(r->results[0].as<int32_t>()[3], 4);
}

TEST_F(ShmTest, FallsBackToGrpcWhenNotOfferedOrNotWanted) {
  TensorSpec spec{DType::kS32, {4}};
  std::vector<int32_t> x = {1, 2, 3, 4};
  // Through the router: no shared memory. Sent to the agent the router
  // names (the default): shared memory, as with the agent's own address.
  auto router_client = *Client::Connect(router_->address());
  CallOptions through;
  through.via_router = true;
  auto r = router_client->Call(CopyRequest(spec, x.data()), through);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NE(r->transport, Transport::kShm);
  r = router_client->Call(CopyRequest(spec, x.data()), testing::SharedMemoryAtAnySize());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->transport, Transport::kShm);
  EXPECT_FALSE(r->via_router);
  // Turned off by the caller, either way.
  CallOptions o;
  o.allow_shm = false;
  r = AgentClient()->Call(CopyRequest(spec, x.data()), o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->transport, Transport::kGrpc);
  CallOptions grpc_only;
  grpc_only.transport = Transport::kGrpc;
  r = AgentClient()->Call(CopyRequest(spec, x.data()), grpc_only);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->transport, Transport::kGrpc);
  EXPECT_EQ(r->rpc, Rpc::kUnary);
  // An RPC shape asked for is a gRPC call.
  CallOptions streamed;
  streamed.rpc = Rpc::kStream;
  r = AgentClient()->Call(CopyRequest(spec, x.data()), streamed);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->transport, Transport::kGrpc);
  EXPECT_EQ(r->rpc, Rpc::kStream);
}

TEST_F(ShmTest, ATransportAskedForIsUsedOrRefused) {
  TensorSpec spec{DType::kS32, {4}};
  std::vector<int32_t> x = {1, 2, 3, 4};
  CallOptions shm;
  shm.transport = Transport::kShm;
  auto r = AgentClient()->Call(CopyRequest(spec, x.data()), shm);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->transport, Transport::kShm);
  // Through the router there is no shared memory to use.
  shm.via_router = true;
  auto router_client = *Client::Connect(router_->address());
  r = router_client->Call(CopyRequest(spec, x.data()), shm);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
  EXPECT_THAT(r.status().message(), ::testing::HasSubstr("transport shm: the target is not an "
                                                         "agent on this host that offers"));
  // The agent the router names is local: shared memory.
  shm.via_router = false;
  r = router_client->Call(CopyRequest(spec, x.data()), shm);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->transport, Transport::kShm);
  // Asked for, UCX is used even to a same-host agent (tests/ucx_test.cc).
  CallOptions ucx;
  ucx.transport = Transport::kUcx;
  r = AgentClient()->Call(CopyRequest(spec, x.data()), ucx);
  if (client_internal::UcxBuiltIn()) {
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->transport, Transport::kUcx);
  } else {
    EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
    EXPECT_EQ(r.status().message(),
              "transport ucx: this build of farcall has no UCX data plane; use auto, grpc or shm.");
  }
}

TEST_F(ShmTest, SharedBuffersGoWithoutACopyAndAreUpdatedInPlace) {
  auto client = AgentClient();
  constexpr int kN = 1 << 20;
  auto xb = client->AllocateShared(kN * sizeof(float));
  auto yb = client->AllocateShared(kN * sizeof(float));
  ASSERT_TRUE(xb.ok() && yb.ok()) << xb.status() << yb.status();
  float* x = reinterpret_cast<float*>(xb->data());
  float* y = reinterpret_cast<float*>(yb->data());
  for (int i = 0; i < kN; ++i) {
    x[i] = i % 1000;
    y[i] = 2;
  }
  TensorSpec spec{DType::kF32, {kN}};
  CallRequest req;
  req.handler = "axpy";
  req.args = {Arg::In(spec, x), Arg::InOut(spec, y)};
  req.results = {spec};
  req.aliases = {{1, 0}};
  req.attributes["alpha"] = 0.5;
  auto r = client->Call(req);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->transport, Transport::kShm);
  EXPECT_EQ(r->results[0].data, yb->data());
  for (int i = 0; i < kN; i += 4099) ASSERT_EQ(y[i], 0.5f * (i % 1000) + 2) << i;
  // A non-aliased result of an arg in a shared buffer.
  auto c = client->Call(CopyRequest(spec, x));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(std::memcmp(c->results[0].data, x, kN * sizeof(float)), 0);
}

TEST_F(ShmTest, SharedBuffersNeedALocalAgent) {
  auto via_router = *Client::Connect(router_->address());
  auto b = via_router->AllocateShared(1024);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kFailedPrecondition);
}

// A header naming shared memory, sent the way an outside client would.
grpc::Status RawShmCall(const std::string& region, uint64_t arg_offset, bool with_chunk,
                        const std::string& target = ShmTest::agent_->address()) {
  auto stub = v1::Agent::NewStub(grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
  v1::ExecuteRequest req;
  v1::CallHeader* h = req.mutable_header();
  h->set_handler("copy");
  h->add_platforms("cpu");
  v1::TensorSpec spec;
  spec.set_dtype(v1::F32);
  spec.add_dims(4);
  *h->add_args() = spec;
  *h->add_results() = spec;
  h->mutable_shm()->set_region(region);
  h->mutable_shm()->add_arg_offsets(arg_offset);
  h->mutable_shm()->add_result_offsets(0);
  if (with_chunk) req.add_chunks()->set_data(std::string(16, 'x'));
  grpc::ClientContext ctx;
  v1::ExecuteResponse resp;
  return stub->Call(&ctx, req, &resp);
}

// Registers a 1 MiB memfd with `seals` over the raw socket; returns its
// token. `seal` true: the seals the agent requires.
std::string RegisterRegion(int sock, bool seal, shm::Reply* reply_out = nullptr,
                           int seals = F_SEAL_SHRINK | F_SEAL_SEAL) {
  int fd = memfd_create("t", MFD_ALLOW_SEALING);
  EXPECT_EQ(ftruncate(fd, 1 << 20), 0);
  if (seal) {
    EXPECT_EQ(fcntl(fd, F_ADD_SEALS, seals), 0);
  }
  shm::Request req;
  req.op = shm::kOpRegister;
  req.size = 1 << 20;
  req.fd = fd;
  EXPECT_TRUE(shm::SendRequest(sock, req).ok());
  close(fd);
  auto reply = shm::ReceiveReply(sock);
  EXPECT_TRUE(reply.ok());
  if (reply_out != nullptr) *reply_out = *reply;
  return reply->status == 0 ? reply->token : "";
}

TEST_F(ShmTest, OtherUsersAreRefusedAndTheirCallsGoOverGrpc) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run a client as another user";
  // The CLI as user nobody (65534): its shared memory is refused, so its
  // call goes over gRPC, and bench --shm, which insists, says why.
  const std::string as_nobody = absl::StrCat("setpriv --reuid=65534 --regid=65534 --clear-groups ",
                                             FARCALL_CLI_BIN, " --target=", agent_->address());
  testing::CommandResult r = testing::RunCommand(as_nobody + " --help");
  if (r.exit_code == 126 || r.exit_code == 127) {
    GTEST_SKIP() << "user nobody cannot run the CLI from this build folder: " << r.output;
  }
  r = testing::RunCommand(as_nobody + " call copy 'float32[4]:iota' --results='float32[4]'");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("unary Call"));
  r = testing::RunCommand(as_nobody + " bench --shm --calls=1 --bytes=64");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--shm"));
  // The agent's own user still gets it.
  r = testing::RunCommand(absl::StrCat(FARCALL_CLI_BIN, " --target=", agent_->address(),
                                       " bench --shm --calls=1 --bytes=64"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST_F(ShmTest, RegionsOfFailedCallsAreNeverReused) {
  auto channel = client_internal::ShmChannel::Connect(Describe().shm_socket);
  ASSERT_TRUE(channel.ok()) << channel.status();
  std::string first;
  {
    auto r = (*channel)->Acquire(100);
    ASSERT_TRUE(r.ok());
    first = (*r)->token;
  }
  std::string second;
  {
    auto r = (*channel)->Acquire(100);
    ASSERT_TRUE(r.ok());
    second = (*r)->token;
    EXPECT_EQ(second, first);  // a region of a call that ended well is reused
    (*r)->reusable = false;    // as after a deadline
  }
  auto r = (*channel)->Acquire(100);
  ASSERT_TRUE(r.ok());
  EXPECT_NE((*r)->token, second);
}

TEST(ShmBudgetTest, SharedMemoryCallsCountAgainstTheBudget) {
  auto agent = ChildProcess::Start(FARCALL_AGENT_BIN,
                                   {"--listen=127.0.0.1:0", "--max_inflight_bytes=1048576"});
  ASSERT_TRUE(agent.ok()) << agent.status();
  auto client = Client::Connect((*agent)->address());
  ASSERT_TRUE(client.ok());
  std::vector<uint8_t> in(1 << 20, 1);  // footprint 2 MiB with its result
  auto r = (*client)->Call(CopyRequest(TensorSpec{DType::kU8, {1 << 20}}, in.data()));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << r.status();
  EXPECT_THAT(r.status().message(), HasSubstr("over the agent's budget of 1048576 bytes"));
  std::vector<uint8_t> small(1000, 1);
  r = (*client)->Call(CopyRequest(TensorSpec{DType::kU8, {1000}}, small.data()),
                      testing::SharedMemoryAtAnySize());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->transport, Transport::kShm);
}

constexpr char kNotHeld[] =
    "the call names a shared-memory region this agent does not hold for its caller (regions "
    "end when their client disconnects or the agent restarts).";

TEST_F(ShmTest, UnknownRegionIsNotFoundAndTheTokenIsNotEchoed) {
  grpc::Status s = RawShmCall(std::string(32, 'a'), 0, false);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(s.error_message(), kNotHeld);
  // A right id with a wrong secret, and a token of the wrong length.
  auto sock = shm::Connect(Describe().shm_socket);
  ASSERT_TRUE(sock.ok()) << sock.status();
  std::string token = RegisterRegion(*sock, /*seal=*/true);
  ASSERT_EQ(token.size(), shm::kTokenSize);
  std::string forged = token;
  forged.back() = forged.back() == '0' ? '1' : '0';
  EXPECT_EQ(RawShmCall(forged, 0, false).error_message(), kNotHeld);
  EXPECT_EQ(RawShmCall(token.substr(0, 8), 0, false).error_message(), kNotHeld);
  EXPECT_TRUE(RawShmCall(token, 0, false).ok());
  close(*sock);
}

// Run by the test below as another user (not on its own): a call naming the
// token in FARCALL_CHILD_TOKEN on the agent at FARCALL_CHILD_TARGET.
TEST(ShmChild, CallNamingAToken) {
  const char* target = std::getenv("FARCALL_CHILD_TARGET");
  const char* token = std::getenv("FARCALL_CHILD_TOKEN");
  if (target == nullptr || token == nullptr) {
    GTEST_SKIP() << "a helper that AnotherUserCannotUseARegionsToken runs as another user";
  }
  grpc::Status s = RawShmCall(token, 0, false, target);
  std::printf("child-answer %d %s\n", static_cast<int>(s.error_code()), s.error_message().c_str());
}

TEST_F(ShmTest, AnotherUserCannotUseARegionsToken) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run a client as another user";
  auto sock = shm::Connect(Describe().shm_socket);
  ASSERT_TRUE(sock.ok()) << sock.status();
  std::string token = RegisterRegion(*sock, /*seal=*/true);
  ASSERT_EQ(token.size(), shm::kTokenSize);
  ASSERT_TRUE(RawShmCall(token, 0, false).ok());  // its own user may
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  ASSERT_GT(n, 0);
  self[n] = '\0';
  // Even knowing the token, user nobody (65534) on the same host gets the
  // same answer as for a token that does not exist.
  ::farcall::testing::CommandResult r = ::farcall::testing::RunCommand(
      absl::StrCat("FARCALL_CHILD_TARGET=", agent_->address(), " FARCALL_CHILD_TOKEN=", token,
                   " setpriv --reuid=65534 --regid=65534 --clear-groups ", self,
                   " --gtest_filter=ShmChild.CallNamingAToken"));
  EXPECT_THAT(r.output, HasSubstr(absl::StrCat("child-answer 5 ", kNotHeld))) << r.output;
  close(*sock);
}

TEST_F(ShmTest, OffsetsOutsideTheRegionAndChunksAreRefused) {
  auto sock = shm::Connect(Describe().shm_socket);
  ASSERT_TRUE(sock.ok()) << sock.status();
  std::string token = RegisterRegion(*sock, /*seal=*/true);
  ASSERT_EQ(token.size(), shm::kTokenSize);
  grpc::Status s = RawShmCall(token, (1 << 20) - 8, false);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(),
              HasSubstr("args[0] at [1048568, 1048584) lies outside shared-memory region"));
  s = RawShmCall(token, 0, /*with_chunk=*/true);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("carries no chunks"));
  EXPECT_TRUE(RawShmCall(token, 0, false).ok());
  close(*sock);
}

TEST_F(ShmTest, UnsealedMemfdIsRefused) {
  auto sock = shm::Connect(Describe().shm_socket);
  ASSERT_TRUE(sock.ok());
  shm::Reply reply;
  EXPECT_EQ(RegisterRegion(*sock, /*seal=*/false, &reply), "");
  EXPECT_EQ(reply.status, static_cast<uint8_t>(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(reply.message, HasSubstr("sealed with F_SEAL_SHRINK and F_SEAL_SEAL"));
  // Shrink-sealed but not seal-sealed is refused too.
  EXPECT_EQ(RegisterRegion(*sock, /*seal=*/true, &reply, F_SEAL_SHRINK), "");
  EXPECT_EQ(reply.status, static_cast<uint8_t>(absl::StatusCode::kFailedPrecondition));
  close(*sock);
}

TEST_F(ShmTest, RegionsGoAwayWithTheClient) {
  const int64_t before = Describe().shm_regions;
  auto sock = shm::Connect(Describe().shm_socket);
  ASSERT_TRUE(sock.ok());
  ASSERT_FALSE(RegisterRegion(*sock, true).empty());
  EXPECT_EQ(Describe().shm_regions, before + 1);
  close(*sock);
  // The agent notices the closed socket on its own thread; wait for it by
  // asking, with a bound, rather than sleeping a fixed time.
  absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (Describe().shm_regions != before && absl::Now() < deadline) {
  }
  EXPECT_EQ(Describe().shm_regions, before);
}

TEST(ShmLimitTest, AConnectionRegistersAtMostShmMaxBytes) {
  auto agent =
      ChildProcess::Start(FARCALL_AGENT_BIN, {"--listen=127.0.0.1:0", "--shm_max_bytes=1572864"});
  ASSERT_TRUE(agent.ok()) << agent.status();
  auto client = Client::Connect((*agent)->address());
  ASSERT_TRUE(client.ok());
  auto info = (*client)->Describe();
  ASSERT_TRUE(info.ok()) << info.status();
  auto sock = shm::Connect(info->shm_socket);
  ASSERT_TRUE(sock.ok()) << sock.status();
  EXPECT_EQ(RegisterRegion(*sock, /*seal=*/true).size(), shm::kTokenSize);  // 1 MiB
  shm::Reply reply;
  EXPECT_EQ(RegisterRegion(*sock, /*seal=*/true, &reply), "");  // 1 MiB more
  EXPECT_EQ(reply.status, static_cast<uint8_t>(absl::StatusCode::kResourceExhausted));
  EXPECT_EQ(reply.message,
            "a connection may register at most 1572864 bytes of shared memory "
            "(--shm_max_bytes); it holds 1048576 and asks for 1048576 more.");
  close(*sock);
}

TEST(ShmRestartTest, ClientsUseSharedMemoryAgainAfterTheAgentRestarts) {
  auto agent = ChildProcess::Start(FARCALL_AGENT_BIN, {"--listen=127.0.0.1:0"});
  ASSERT_TRUE(agent.ok()) << agent.status();
  const int port = (*agent)->port();
  auto client = Client::Connect((*agent)->address());
  ASSERT_TRUE(client.ok());
  std::vector<uint8_t> in(4096, 7);
  const CallRequest req = CopyRequest(TensorSpec{DType::kU8, {4096}}, in.data());
  auto r = (*client)->Call(req, testing::SharedMemoryAtAnySize());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->transport, Transport::kShm);
  (*agent)->Kill();
  // The same address, a new process: the old regions and socket are gone.
  agent = ChildProcess::Start(FARCALL_AGENT_BIN, {absl::StrCat("--listen=127.0.0.1:", port)});
  ASSERT_TRUE(agent.ok()) << agent.status();
  CallOptions o = testing::SharedMemoryAtAnySize();
  o.wait_for_ready = true;
  o.timeout = absl::Seconds(20);
  // The client is back on shared memory within a few calls. The first may
  // go over gRPC, or fail UNAVAILABLE if it left before the client saw the
  // old connection close (a caller's retry then succeeds).
  bool back = false;
  for (int i = 0; i < 5 && !back; ++i) {
    r = (*client)->Call(req, o);
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();
      continue;
    }
    EXPECT_EQ(std::memcmp(r->results[0].data, in.data(), in.size()), 0);
    back = r->transport == Transport::kShm;
  }
  EXPECT_TRUE(back) << "the client never went back to shared memory";
}

}  // namespace
}  // namespace farcall

int main(int argc, char** argv) {
  grpc_init();
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
