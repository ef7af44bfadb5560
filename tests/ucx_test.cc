// The UCX data plane end to end: which transport a call takes, the
// contract's answers to UCX headers, and what a stalled, cancelled or
// unreachable UCX peer leaves behind (nothing). Agents run as real
// processes on loopback ports the OS picks; UCX moves bytes over TCP
// (ctest sets UCX_TLS=tcp), as between hosts.
#include <array>
#include <fstream>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/ucx_exchange.h"
#include "core/ucx/piece_mac.h"
#include "core/ucx/piece_transfers.h"
#include "core/ucx/transfer_set.h"
#include "core/ucx/ucx_worker.h"
#include "farcall/client.h"
#include "farcall/v1/farcall.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpc/grpc.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/process_harness.h"

namespace farcall {
namespace {

using ::farcall::testing::ChildProcess;
using ::testing::HasSubstr;

std::unique_ptr<ChildProcess> Start(std::vector<std::string> args) {
  args.insert(args.begin(), "--listen=127.0.0.1:0");
  auto p = ChildProcess::Start(FARCALL_AGENT_BIN, args);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? *std::move(p) : nullptr;
}

std::unique_ptr<Client> Connect(const ChildProcess& agent, ClientOptions o = {}) {
  auto c = Client::Connect(agent.address(), o);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *std::move(c) : nullptr;
}

std::vector<uint8_t> Pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 131 + seed + (i >> 12));
  return v;
}

// Options for calls of these tests: the agents are on this host, but the
// calls are to take the path between hosts, not shared memory.
CallOptions NoShm() {
  CallOptions o;
  o.allow_shm = false;
  return o;
}

// A call of `copy` on `in`.
CallRequest CopyRequest(const std::vector<uint8_t>& in) {
  TensorSpec spec{DType::kU8, {static_cast<int64_t>(in.size())}};
  CallRequest req;
  req.platform = "cpu";
  req.handler = "copy";
  req.args = {Arg::In(spec, in.data())};
  req.results = {spec};
  return req;
}

// `copy` of `in`, returning the result (or the failure).
absl::StatusOr<CallResult> Copy(Client& c, const std::vector<uint8_t>& in,
                                CallOptions o = NoShm()) {
  return c.Call(CopyRequest(in), o);
}

grpc::Status RawCall(const ChildProcess& agent, const v1::ExecuteRequest& req,
                     int deadline_ms = 20000) {
  auto channel = grpc::CreateChannel(agent.address(), grpc::InsecureChannelCredentials());
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(deadline_ms));
  v1::ExecuteResponse resp;
  return v1::Agent::NewStub(channel)->Call(&ctx, req, &resp);
}

v1::AgentInfo Describe(const ChildProcess& agent) {
  auto channel = grpc::CreateChannel(agent.address(), grpc::InsecureChannelCredentials());
  grpc::ClientContext ctx;
  v1::AgentInfo info;
  grpc::Status s = v1::Agent::NewStub(channel)->Describe(&ctx, v1::DescribeRequest(), &info);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return info;
}

int64_t InflightCalls(const ChildProcess& agent) { return Describe(agent).inflight_calls(); }

// The agent's calls in flight once it holds none, or after 10 s (then the
// count it holds). An agent ends a call a moment after its client has the
// answer, on another thread: ask until it has, never once.
int64_t SettledInflightCalls(const ChildProcess& agent) {
  int64_t inflight = -1;
  for (absl::Time end = absl::Now() + absl::Seconds(10); absl::Now() < end;) {
    if ((inflight = InflightCalls(agent)) == 0) break;
  }
  return inflight;
}

// A header for `copy` of `n` bytes over UCX, answering to `worker`.
v1::ExecuteRequest UcxCopy(int64_t n, const std::string& worker_address,
                           const std::string& platform = "cpu") {
  v1::ExecuteRequest r;
  v1::CallHeader* h = r.mutable_header();
  h->set_handler("copy");
  h->add_platforms(platform);
  for (auto* s : {h->add_args(), h->add_results()}) {
    s->set_dtype(v1::U8);
    s->add_dims(n);
  }
  h->mutable_ucx()->set_worker_address(worker_address);
  h->mutable_ucx()->set_tag(ucx::NewCallTag());
  h->mutable_ucx()->set_key(ucx::NewMacKey());
  return r;
}

std::unique_ptr<ucx::Worker> TestWorker() {
  ucx::Worker::Options o;
  o.discard_unexpected = true;
  auto w = ucx::Worker::Create(o);
  EXPECT_TRUE(w.ok()) << w.status();
  return w.ok() ? *std::move(w) : nullptr;
}

TEST(UcxTest, AutoTakesUcxForLargeCallsAndGrpcForSmallOnes) {
  auto agent = Start({});
  ASSERT_TRUE(agent);
  auto client = Connect(*agent);
  ASSERT_TRUE(client);
  auto d = client->Describe();
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(d->offers_ucx);
  // Over several 4 MiB pieces, an odd size, and at the threshold.
  for (size_t n : {(size_t{9} << 20) + 3, size_t{1} << 20}) {
    std::vector<uint8_t> in = Pattern(n, 3);
    absl::StatusOr<CallResult> r = Copy(*client, in);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->transport, Transport::kUcx) << n;
    EXPECT_EQ(std::memcmp(r->results[0].data, in.data(), n), 0) << n;
  }
  std::vector<uint8_t> small = Pattern(64, 5);
  absl::StatusOr<CallResult> r = Copy(*client, small);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->transport, Transport::kGrpc);
}

TEST(UcxTest, ManyTensorsAnEmptyOneAndAnAliasedOneLandInPlace) {
  auto agent = Start({});
  ASSERT_TRUE(agent);
  auto client = Connect(*agent);
  ASSERT_TRUE(client);
  const int64_t n = (int64_t{5} << 20) + 1;
  std::vector<float> x(n / 4, 2.0f), y(n / 4, 1.0f), expected(n / 4, 7.0f);
  TensorSpec spec{DType::kF32, {n / 4}};
  CallRequest req;
  req.platform = "cpu";
  req.handler = "axpy";  // y <- alpha * x + y, in place
  req.args = {Arg::In(spec, x.data()), Arg::InOut(spec, y.data())};
  req.results = {spec};
  req.aliases = {{1, 0}};
  req.attributes["alpha"] = 3.0;
  CallOptions o = NoShm();
  o.transport = Transport::kUcx;
  absl::StatusOr<CallResult> r = client->Call(req, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->transport, Transport::kUcx);
  EXPECT_TRUE(r->results[0].aliased);
  EXPECT_EQ(y, expected);
  // No tensors at all, forced: nothing moves, the call still runs.
  CallRequest empty;
  empty.platform = "cpu";
  empty.handler = "copy";
  TensorSpec none{DType::kF32, {0}};
  std::vector<float> nothing(1);
  empty.args = {Arg::In(none, nothing.data())};
  empty.results = {none};
  r = client->Call(empty, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->transport, Transport::kUcx);
}

TEST(UcxTest, AnAgentWithoutUcxRefusesItAndAutoStaysOnGrpc) {
  auto agent = Start({"--transports=grpc,shm"});
  ASSERT_TRUE(agent);
  auto client = Connect(*agent);
  ASSERT_TRUE(client);
  EXPECT_FALSE(client->Describe()->offers_ucx);
  std::vector<uint8_t> in = Pattern(2 << 20, 1);
  CallOptions forced = NoShm();
  forced.transport = Transport::kUcx;
  absl::StatusOr<CallResult> r = Copy(*client, in, forced);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(r.status().message(),
            "transport ucx: the agent offers no UCX data plane (it was built without UCX, was "
            "started with --transports without ucx, or requires TLS or tokens without "
            "--allow_ucx_with_tls).");
  r = Copy(*client, in);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->transport, Transport::kGrpc);
  // An outside client that sends a UCX header anyway.
  auto worker = TestWorker();
  ASSERT_TRUE(worker);
  grpc::Status s = RawCall(*agent, UcxCopy(16, worker->address()));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(s.error_message(), "this agent offers no UCX data plane; send the tensors as chunks.");
}

TEST(UcxTest, TokensTurnUcxOffUnlessTheFabricIsDeclaredTrusted) {
  char dir_template[] = "/tmp/farcall-ucx-XXXXXX";
  const std::string dir = mkdtemp(dir_template);
  std::ofstream(dir + "/tokens") << "secret-token-0123456789 *\n";
  ClientOptions with_token;
  with_token.token = "secret-token-0123456789";
  auto off = Start({"--tokens_file=" + dir + "/tokens"});
  auto on = Start({"--tokens_file=" + dir + "/tokens", "--allow_ucx_with_tls"});
  ASSERT_TRUE(off && on);
  auto d = Connect(*off, with_token)->Describe();
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_FALSE(d->offers_ucx);
  auto c = Connect(*on, with_token);
  d = c->Describe();
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(d->offers_ucx);
  // The token still guards the call; only the bytes go over UCX.
  std::vector<uint8_t> in = Pattern(2 << 20, 9);
  absl::StatusOr<CallResult> r = Copy(*c, in);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->transport, Transport::kUcx);
  absl::StatusOr<CallResult> refused = Copy(*Connect(*on), in);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnauthenticated);
}

TEST(UcxTest, UcxHeadersGetTheContractsAnswers) {
  auto agent = Start({});
  ASSERT_TRUE(agent);
  auto worker = TestWorker();
  ASSERT_TRUE(worker);
  v1::ExecuteRequest chunked = UcxCopy(4, worker->address());
  v1::Chunk* c = chunked.add_chunks();
  c->set_index(0);
  c->set_data("abcd");
  grpc::Status s = RawCall(*agent, chunked);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "a UCX call carries no chunks; its tensors travel over UCX.");

  v1::ExecuteRequest both = UcxCopy(4, worker->address());
  both.mutable_header()->mutable_shm()->set_region("x");
  s = RawCall(*agent, both);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "the call names both shm and ucx; its tensors travel one way only.");

  s = RawCall(*agent, UcxCopy(4, ""));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "ucx.worker_address must hold 1 to 4096 bytes; it holds 0.");

  v1::ExecuteRequest keyless = UcxCopy(4, worker->address());
  keyless.mutable_header()->mutable_ucx()->clear_key();
  s = RawCall(*agent, keyless);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "ucx.key must hold 16 random bytes; it holds 0.");

  // Execute carries tensors in its own messages.
  auto channel = grpc::CreateChannel(agent->address(), grpc::InsecureChannelCredentials());
  grpc::ClientContext ctx;
  auto stub = v1::Agent::NewStub(channel);
  auto stream = stub->Execute(&ctx);
  stream->Write(UcxCopy(4, worker->address()));
  stream->WritesDone();
  v1::ExecuteResponse resp;
  while (stream->Read(&resp)) {
  }
  s = stream->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(s.error_message(),
            "a UCX call goes as a unary Call; Execute carries tensors in its messages.");
  // The stream RPC has no UCX: the client says so before sending.
  auto client = Connect(*agent);
  CallOptions o = NoShm();
  o.transport = Transport::kUcx;
  o.rpc = Rpc::kStream;
  absl::StatusOr<CallResult> r = Copy(*client, Pattern(8, 0), o);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(r.status().message(), HasSubstr("a UCX call goes as a unary Call"));
}

// A hostile caller that sends one byte where each 4 MiB piece of its args
// belongs must not get back what the agent's recycled blocks held before
// (another caller's tensor): a short piece ends the call with DATA_LOSS.
TEST(UcxTest, ShortPiecesAreDataLossNotAnotherCallersBytes) {
  auto agent = Start({});
  ASSERT_TRUE(agent);
  auto client = Connect(*agent);
  ASSERT_TRUE(client);
  auto d = client->Describe();
  ASSERT_TRUE(d.ok() && d->offers_ucx);
  constexpr int64_t kBytes = int64_t{8} << 20;
  // A victim's call leaves its bytes in blocks the agent keeps for reuse.
  std::vector<uint8_t> secret = Pattern(kBytes, 77);
  absl::StatusOr<CallResult> victim = Copy(*client, secret);
  ASSERT_TRUE(victim.ok()) << victim.status();
  ASSERT_EQ(victim->transport, Transport::kUcx);

  auto channel = grpc::CreateChannel(agent->address(), grpc::InsecureChannelCredentials());
  grpc::ClientContext info_ctx;
  v1::AgentInfo info;
  ASSERT_TRUE(v1::Agent::NewStub(channel)->Describe(&info_ctx, {}, &info).ok());
  auto attacker = TestWorker();
  ASSERT_TRUE(attacker);
  v1::ExecuteRequest req = UcxCopy(kBytes, attacker->address());
  const uint64_t tag = req.header().ucx().tag();
  ucx::ReadyBytes ready{};
  auto told =
      attacker->StartReceive(ucx::TagOf(tag, ucx::Carries::kReady, 0), ready.data(), ready.size());
  std::vector<uint8_t> result(kBytes, 0);
  auto results = attacker->StartReceive(ucx::TagOf(tag, ucx::Carries::kResult, 0), result.data(),
                                        ucx::kPieceBytes);
  std::future<grpc::Status> answer =
      std::async(std::launch::async, [&] { return RawCall(*agent, req); });
  ASSERT_TRUE(told->Wait(absl::Now() + absl::Seconds(20)).ok());
  absl::StatusOr<uint64_t> agent_tag = ucx::ReadReady(req.header().ucx().key(), ready);
  ASSERT_TRUE(agent_tag.ok()) << agent_tag.status();
  const uint8_t one = 1;
  for (uint64_t k = 0; k < kBytes / ucx::kPieceBytes; ++k) {
    attacker->StartSend(info.ucx_address(), ucx::TagOf(*agent_tag, ucx::Carries::kArg, k), &one, 1);
  }
  grpc::Status s = answer.get();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DATA_LOSS) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("1 bytes came where 4194304 were expected"));
  results->Cancel();
  results->Wait(absl::InfiniteFuture()).IgnoreError();
  EXPECT_NE(std::memcmp(result.data(), secret.data(), 64), 0) << "the victim's bytes came back";
  EXPECT_EQ(SettledInflightCalls(*agent), 0);
}

// A third UCX worker that knows a call's tags (here: it watches the ready
// message go by) sends a piece of its own before the client's. The agent
// finds it out by its MAC: the handler never sees it, the call ends as one
// whose args did not arrive (so that the client may send them again by
// gRPC), and the client's own piece is thrown away.
// A raw UCX call of `copy` of `n` bytes from `worker`, told to send: its
// answer comes once its args were sent (SendArgs) or it ended otherwise.
struct UcxCallInFlight {
  v1::ExecuteRequest req;
  std::future<grpc::Status> answer;
  uint64_t agent_tag = 0;
  std::shared_ptr<ucx::TransferSet> sends;
  std::vector<uint8_t> args;  // what SendArgs sends, kept until the sends end

  static std::unique_ptr<UcxCallInFlight> Start(const ChildProcess& agent, ucx::Worker& worker,
                                                int64_t n, const std::string& platform = "cpu") {
    auto c = std::make_unique<UcxCallInFlight>();
    c->req = UcxCopy(n, worker.address(), platform);
    const v1::UcxTensors& u = c->req.header().ucx();
    ucx::ReadyBytes ready{};
    auto told = worker.StartReceive(ucx::TagOf(u.tag(), ucx::Carries::kReady, 0), ready.data(),
                                    ready.size());
    c->answer =
        std::async(std::launch::async, [&agent, req = &c->req] { return RawCall(agent, *req); });
    absl::Status s = told->Wait(absl::Now() + absl::Seconds(20));
    EXPECT_TRUE(s.ok()) << s;
    absl::StatusOr<uint64_t> tag = ucx::ReadReady(u.key(), ready);
    EXPECT_TRUE(tag.ok()) << tag.status();
    if (!s.ok() || !tag.ok()) return nullptr;
    c->agent_tag = *tag;
    return c;
  }
  // Sends `bytes` as the call's args (with their MACs) to the agent at `to`.
  void SendArgs(ucx::Worker& worker, const std::string& to, std::vector<uint8_t> bytes) {
    args = std::move(bytes);
    sends = ucx::TransferSet::Create(worker, nullptr);
    ucx::SendPieces(*sends, to, agent_tag, ucx::Carries::kArg,
                    ucx::PiecesOf({static_cast<int64_t>(args.size())}), {args.data()},
                    req.header().ucx().key());
    sends->Seal();
  }
};

void ExpectAForgedPieceNeverReachesTheHandler(const ChildProcess& agent,
                                              const std::string& platform) {
  const v1::AgentInfo info = Describe(agent);
  auto client = TestWorker(), forger = TestWorker();
  ASSERT_TRUE(client && forger);
  constexpr int64_t kBytes = ucx::kPieceBytes;  // one piece
  auto call = UcxCallInFlight::Start(agent, *client, kBytes, platform);
  ASSERT_TRUE(call);
  // The forger's piece lands first: its rendezvous send ends once taken.
  std::vector<uint8_t> forged(kBytes, 0xEE);
  auto f = forger->StartSend(info.ucx_address(), ucx::TagOf(call->agent_tag, ucx::Carries::kArg, 0),
                             forged.data(), forged.size());
  ASSERT_TRUE(f->Wait(absl::Now() + absl::Seconds(20)).ok());
  // Then the client's, and its MACs.
  call->SendArgs(*client, info.ucx_address(), Pattern(kBytes, 5));
  grpc::Status s = call->answer.get();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  EXPECT_EQ(s.error_message(),
            "ucx: the call's inputs did not arrive (ucx: piece 0 of the call's args failed its "
            "integrity check: bytes the other side did not send reached this call (another UCX "
            "peer that knows its tag), and none of them is used.); the handler did not run.");
  call->sends->Wait(absl::Now() + absl::Seconds(20)).IgnoreError();
  EXPECT_EQ(SettledInflightCalls(agent), 0);
}

TEST(UcxTest, AThirdWorkersForgedPieceNeverReachesTheHandler) {
  auto agent = Start({});
  ASSERT_TRUE(agent);
  ExpectAForgedPieceNeverReachesTheHandler(*agent, "cpu");
}

// On a device agent the forged piece is never queued for the device either
// (only checked pieces are).
TEST(UcxTest, AForgedPieceNeverReachesADeviceAgentsHandler) {
  absl::StatusOr<std::unique_ptr<ChildProcess>> agent =
      ChildProcess::Start(FARCALL_AGENT_BIN, {"--listen=127.0.0.1:0", "--platform=oneapi"});
  if (!agent.ok()) {
    GTEST_SKIP() << "SKIPPED: no oneapi agent here (no OpenCL device): " << agent.status();
  }
  ExpectAForgedPieceNeverReachesTheHandler(**agent, "oneapi");
}

// Endpoints to callers are capped (--ucx_max_endpoints): with the one
// allowed held by a call in flight, another caller's UCX call fails before
// its handler runs, in words that name the flag, and works once the first
// call is over.
TEST(UcxTest, CallersPastTheEndpointCapAreRefusedUntilOneIsFree) {
  auto agent = Start({"--ucx_max_endpoints=1"});
  ASSERT_TRUE(agent);
  const v1::AgentInfo info = Describe(*agent);
  auto first = TestWorker(), second = TestWorker();
  ASSERT_TRUE(first && second);
  constexpr int64_t kBytes = 4096;
  const std::vector<uint8_t> args = Pattern(kBytes, 9);
  // The first caller's call is told to send, and holds its endpoint.
  auto held = UcxCallInFlight::Start(*agent, *first, kBytes);
  ASSERT_TRUE(held);
  grpc::Status refused = RawCall(*agent, UcxCopy(kBytes, second->address()));
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(refused.error_message(),
            "ucx: the call's inputs did not arrive (ucx: all 1 of this worker's endpoints are in "
            "use (--ucx_max_endpoints). This peer gets none now.); the handler did not run.");
  // The first call ends well; then the second caller is served.
  held->SendArgs(*first, info.ucx_address(), args);
  grpc::Status s = held->answer.get();
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(held->sends->Wait(absl::Now() + absl::Seconds(20)).ok());
  auto next = UcxCallInFlight::Start(*agent, *second, kBytes);
  ASSERT_TRUE(next);
  next->SendArgs(*second, info.ucx_address(), args);
  s = next->answer.get();
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(next->sends->Wait(absl::Now() + absl::Seconds(20)).ok());
}

// A client that says it will send over UCX and never does holds the agent's
// memory only until the idle timeout.
TEST(UcxTest, AClientThatNeverSendsItsArgsIsEndedAndItsMemoryFreed) {
  auto agent = Start({"--stream_idle_timeout=1s"});
  ASSERT_TRUE(agent);
  auto worker = TestWorker();
  ASSERT_TRUE(worker);
  grpc::Status s = RawCall(*agent, UcxCopy(8 << 20, worker->address()));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_EQ(s.error_message(),
            "the caller sent nothing for 1s (--stream_idle_timeout); the call was ended.");
  EXPECT_EQ(SettledInflightCalls(*agent), 0);
  // The agent did say it was ready (to a worker that wanted nothing).
  EXPECT_GE(worker->discarded(), 1);
}

// A client that sends only MACs, one now and then, never a byte of its
// args, is idle all the same: only tensor bytes are progress (a MAC every
// few seconds once held the budget for --max_call_seconds).
TEST(UcxTest, ADripOfMacsIsNoProgress) {
  auto agent = Start({"--stream_idle_timeout=1s"});
  ASSERT_TRUE(agent);
  const v1::AgentInfo info = Describe(*agent);
  auto worker = TestWorker();
  ASSERT_TRUE(worker);
  constexpr int kPieces = 16;
  auto call = UcxCallInFlight::Start(*agent, *worker, kPieces * ucx::kPieceBytes);
  ASSERT_TRUE(call);
  // One MAC per 250 ms, each into a receive the agent posted: 16 of them
  // would span 4 s, each resetting a clock that counted transfers.
  std::vector<std::array<uint8_t, ucx::kMacBytes>> macs(kPieces);
  int sent = 0;
  while (sent < kPieces &&
         call->answer.wait_for(std::chrono::milliseconds(250)) != std::future_status::ready) {
    auto t = worker->StartSend(info.ucx_address(),
                               ucx::TagOf(call->agent_tag, ucx::Carries::kMacs, sent),
                               macs[sent].data(), macs[sent].size());
    ASSERT_TRUE(t->Wait(absl::Now() + absl::Seconds(20)).ok());
    ++sent;
  }
  grpc::Status s = call->answer.get();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << s.error_message();
  EXPECT_EQ(s.error_message(),
            "the caller sent nothing for 1s (--stream_idle_timeout); the call was ended.");
  EXPECT_LT(sent, kPieces) << "the call outlived the whole drip";
  EXPECT_EQ(SettledInflightCalls(*agent), 0);
}

// A call cancelled by its deadline, on either side, leaves no transfer in
// flight and no memory held.
TEST(UcxTest, ADeadlineEndsTheCallOnBothSides) {
  auto agent = Start({});
  ASSERT_TRUE(agent);
  auto worker = TestWorker();
  ASSERT_TRUE(worker);
  grpc::Status s = RawCall(*agent, UcxCopy(8 << 20, worker->address()), /*deadline_ms=*/300);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  // The agent ends the call when gRPC tells it of the cancel, just after
  // the client's deadline: ask until it has (bounded).
  EXPECT_EQ(SettledInflightCalls(*agent), 0);

  // The client library: a call that cannot finish in time.
  auto client = Connect(*agent);
  std::vector<uint8_t> in = Pattern(64 << 20, 4);
  CallOptions o = NoShm();
  o.transport = Transport::kUcx;
  o.timeout = absl::Milliseconds(1);
  absl::StatusOr<CallResult> r = Copy(*client, in, o);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded) << r.status();
  auto w = client_internal::ProcessUcxWorker("");
  ASSERT_TRUE(w.ok());
  EXPECT_EQ((*w)->in_flight(), 0);
  // And the next call goes through.
  o.timeout = absl::Seconds(30);
  r = Copy(*client, in, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(std::memcmp(r->results[0].data, in.data(), in.size()), 0);
}

// A device agent (oneapi; PoCL here and in CI) takes a UCX call's pieces
// on toward the device as each is checked. A client that sends half its
// args and stops is ended by the idle timeout: the pieces it did send were
// queued for the device, and their copies end before the call does. The
// agent holds nothing afterwards, and the next call's bytes come back
// whole (the staging blocks the half call used are reused).
TEST(UcxTest, ADeviceAgentEndsAHalfSentCallAndServesTheNextOne) {
  absl::StatusOr<std::unique_ptr<ChildProcess>> started = ChildProcess::Start(
      FARCALL_AGENT_BIN, {"--listen=127.0.0.1:0", "--platform=oneapi", "--stream_idle_timeout=1s"});
  if (!started.ok()) {
    GTEST_SKIP() << "SKIPPED: no oneapi agent here (no OpenCL device): " << started.status();
  }
  ChildProcess& agent = **started;
  const v1::AgentInfo info = Describe(agent);
  ASSERT_FALSE(info.ucx_address().empty()) << "the oneapi agent offers no UCX";
  auto worker = TestWorker();
  ASSERT_TRUE(worker);
  constexpr int64_t kBytes = 4 * ucx::kPieceBytes;
  auto call = UcxCallInFlight::Start(agent, *worker, kBytes, "oneapi");
  ASSERT_TRUE(call);
  // Pieces 0 and 1 of 4, each with its MAC; then nothing.
  std::vector<uint8_t> half = Pattern(2 * ucx::kPieceBytes, 3);
  std::vector<ucx::Piece> pieces = ucx::PiecesOf({kBytes});
  pieces.resize(2);
  auto sends = ucx::TransferSet::Create(*worker, nullptr);
  ucx::SendPieces(*sends, info.ucx_address(), call->agent_tag, ucx::Carries::kArg, pieces,
                  {half.data()}, call->req.header().ucx().key());
  sends->Seal();
  grpc::Status s = call->answer.get();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << s.error_message();
  EXPECT_EQ(s.error_message(),
            "the caller sent nothing for 1s (--stream_idle_timeout); the call was ended.");
  EXPECT_TRUE(sends->Wait(absl::Now() + absl::Seconds(20)).ok());
  EXPECT_EQ(SettledInflightCalls(agent), 0);

  auto client = Connect(agent);
  ASSERT_TRUE(client);
  std::vector<uint8_t> in = Pattern(kBytes + 13, 8);
  CallRequest req = CopyRequest(in);
  req.platform = "oneapi";
  CallOptions o = NoShm();
  o.transport = Transport::kUcx;
  absl::StatusOr<CallResult> r = client->Call(req, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->transport, Transport::kUcx);
  ASSERT_EQ(r->results[0].size, static_cast<int64_t>(in.size()));
  EXPECT_EQ(std::memcmp(r->results[0].data, in.data(), in.size()), 0);
  EXPECT_EQ(SettledInflightCalls(agent), 0);
}

// The agent's UCX cannot reach this client's worker (no transport in
// common): auto sends the call again over gRPC; forced UCX says why.
TEST(UcxTest, AutoFallsBackToGrpcWhenUcxCannotReach) {
  auto agent = Start({"--ucx_transports=tcp"});
  ASSERT_TRUE(agent);
  ClientOptions shm_only;
  shm_only.ucx_transports = "posix";
  if (!client_internal::ProcessUcxWorker("posix").ok()) {
    GTEST_SKIP() << "SKIPPED: UCX here has no posix shared-memory transport";
  }
  auto client = Connect(*agent, shm_only);
  std::vector<uint8_t> in = Pattern(2 << 20, 6);
  CallOptions forced = NoShm();
  forced.transport = Transport::kUcx;
  absl::StatusOr<CallResult> r = Copy(*client, in, forced);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(r.status().message(), HasSubstr("ucx: the call's inputs did not arrive"));
  EXPECT_THAT(r.status().message(), HasSubstr("the handler did not run"));
  r = Copy(*client, in);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->transport, Transport::kGrpc);
  EXPECT_EQ(std::memcmp(r->results[0].data, in.data(), in.size()), 0);
  // An asynchronous call falls back too, even when its client is gone by
  // the time UCX has failed.
  auto other = Connect(*agent, shm_only);
  std::future<absl::StatusOr<CallResult>> f = other->CallFuture(CopyRequest(in), NoShm());
  other.reset();
  r = f.get();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->transport, Transport::kGrpc);
  EXPECT_EQ(std::memcmp(r->results[0].data, in.data(), in.size()), 0);
  EXPECT_EQ(SettledInflightCalls(*agent), 0);
}

}  // namespace
}  // namespace farcall

int main(int argc, char** argv) {
  grpc_init();  // for the whole run (see client.cc)
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
