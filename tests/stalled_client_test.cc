// Clients that stop making progress, or hold a connection for good: the
// agent ends what they hold (--stream_idle_timeout, --stream_stall_timeout,
// --max_connection_age) and other callers go on. The rules live in the
// agent's service, the same on every platform, so these run on cpu.
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "core/error_reason.h"
#include "core/wire/grpc_status.h"
#include "farcall/client.h"
#include "farcall/v1/farcall.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/process_harness.h"
#include "tests/test_calls.h"

namespace farcall {
namespace {

using ::farcall::testing::ChildProcess;

v1::TensorSpec Spec(DType d, std::vector<int64_t> dims) {
  v1::TensorSpec s;
  s.set_dtype(static_cast<v1::DType>(d));
  for (int64_t x : dims) s.add_dims(x);
  return s;
}

void AddChunk(v1::ExecuteRequest* r, uint32_t index, uint64_t offset, size_t size) {
  v1::Chunk* c = r->add_chunks();
  c->set_index(index);
  c->set_offset(offset);
  c->set_data(std::string(size, 1));
}

// A copy of u8[n] whose args are sent in one message (the header too).
v1::ExecuteRequest CopyRequestU8(int64_t n, int64_t send) {
  v1::ExecuteRequest r;
  v1::CallHeader* h = r.mutable_header();
  h->set_handler("copy");
  h->add_platforms("cpu");
  *h->add_args() = Spec(DType::kU8, {n});
  *h->add_results() = Spec(DType::kU8, {n});
  if (send > 0) AddChunk(&r, 0, 0, static_cast<size_t>(send));
  return r;
}

// A call of footprint 2n (copy of u8[n]) through the client, with `timeout`.
absl::Status CopyCall(const std::string& address, int64_t n, absl::Duration timeout,
                      const std::string& token = "") {
  ClientOptions client_options;
  client_options.token = token;
  auto client = Client::Connect(address, client_options);
  if (!client.ok()) return client.status();
  std::vector<uint8_t> x(n, 5);
  CallRequest req;
  req.platform = "cpu";
  req.handler = "copy";
  req.args = {Arg::In(TensorSpec{DType::kU8, {n}}, x.data())};
  req.results = {TensorSpec{DType::kU8, {n}}};
  CallOptions opts;
  opts.timeout = timeout;
  opts.allow_shm = false;
  opts.rpc = Rpc::kStream;
  return (*client)->Call(req, opts).status();
}

// Whether a stalled call holds the agent's budget: once it does, another
// copy of u8[n] cannot finish quickly (it waits for memory). Asked until so,
// a bounded number of times.
bool BudgetHeld(const std::string& address, int64_t n, const std::string& token = "") {
  for (int i = 0; i < 100; ++i) {
    if (CopyCall(address, n, absl::Milliseconds(300), token).code() ==
        absl::StatusCode::kDeadlineExceeded) {
      return true;
    }
  }
  return false;
}

TEST(GrpcLimitsTest, CallsPastTheStreamLimitOfAConnectionWait) {
  auto a = ChildProcess::Start(
      FARCALL_AGENT_BIN, {"--platform=cpu", "--listen=127.0.0.1:0", "--max_concurrent_streams=1"});
  ASSERT_TRUE(a.ok()) << a.status();
  auto client = Client::Connect((*a)->address());
  ASSERT_TRUE(client.ok());
  // Connected, with the server's settings (one stream) known to the client,
  // and known to be an agent: CallFuture below then starts its call before
  // it returns (for a target not yet known it starts on a thread of the
  // client's, a moment later).
  ASSERT_TRUE((*client)->Health().ok());
  ASSERT_TRUE(testing::CallOnFour(**client).ok());
  CallRequest sleep;
  sleep.platform = "cpu";
  sleep.handler = "sleep";
  sleep.attributes["ms"] = int64_t{60000};
  CallOptions long_call;
  long_call.timeout = absl::Seconds(30);
  long_call.rpc = Rpc::kStream;
  auto held = (*client)->CallFuture(sleep, long_call);
  // The sleep holds the connection's one stream: a second call on the same
  // connection waits for a stream until its deadline.
  CallRequest copy = sleep;
  copy.handler = "fail";
  copy.attributes = {{"code", int64_t{0}}, {"message", std::string("ok")}};
  CallOptions short_call;
  short_call.timeout = absl::Milliseconds(500);
  short_call.allow_shm = false;
  absl::Status s = (*client)->Call(copy, short_call).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
}

// An agent started with `flags` whose budget holds one copy of u8[kStalledN],
// and a streamed call to it that sent its header and 1 KiB, then stalls
// holding that budget. Null, with the failure reported, if it cannot start.
constexpr int64_t kStalledN = 2 << 20;  // footprint 4 MiB
struct StalledUpload {
  std::unique_ptr<ChildProcess> agent;
  std::unique_ptr<v1::Agent::Stub> stub;
  grpc::ClientContext ctx;
  std::unique_ptr<grpc::ClientReaderWriter<v1::ExecuteRequest, v1::ExecuteResponse>> stream;

  // What the agent ended the stalled call with.
  grpc::Status Finish() {
    v1::ExecuteResponse resp;
    while (stream->Read(&resp)) {
    }
    return stream->Finish();
  }
};

std::unique_ptr<StalledUpload> StartStalledUpload(std::vector<std::string> flags) {
  flags.insert(flags.begin(),
               {"--platform=cpu", "--listen=127.0.0.1:0", "--max_inflight_bytes=6291456"});
  auto a = ChildProcess::Start(FARCALL_AGENT_BIN, flags);
  if (!a.ok()) {
    ADD_FAILURE() << a.status();
    return nullptr;
  }
  auto u = std::make_unique<StalledUpload>();
  u->agent = *std::move(a);
  u->stub = v1::Agent::NewStub(
      grpc::CreateChannel(u->agent->address(), grpc::InsecureChannelCredentials()));
  u->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  u->stream = u->stub->Execute(&u->ctx);
  // The header and the first KiB, then nothing: no more chunks, no half-close.
  if (!u->stream->Write(CopyRequestU8(kStalledN, 1024))) {
    ADD_FAILURE() << "the agent took no request";
    return nullptr;
  }
  if (!BudgetHeld(u->agent->address(), kStalledN)) {
    ADD_FAILURE() << "the stalled call never held the budget";
    return nullptr;
  }
  return u;
}

TEST(StreamIdleTest, ACallerThatStopsSendingIsEndedAndItsBudgetFreed) {
  std::unique_ptr<StalledUpload> u = StartStalledUpload({"--stream_idle_timeout=1s"});
  ASSERT_NE(u, nullptr);
  // The agent ends the stalled call after a second, freeing its memory, so
  // this one gets it well before its own deadline.
  absl::Status next = CopyCall(u->agent->address(), kStalledN, absl::Seconds(20));
  EXPECT_TRUE(next.ok()) << next;
  grpc::Status s = u->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << s.error_message();
  EXPECT_EQ(s.error_message(),
            "the caller sent nothing for 1s (--stream_idle_timeout); the call was ended.");
}

// A call still sending its inputs when the agent's drain runs out never
// reached its handler: the agent answers it with the draining reason (it may
// go elsewhere, side effects or not), not DRAIN_CUT, and exits.
TEST(StreamIdleTest, ACallStillUploadingWhenTheDrainEndsIsAnsweredAsNeverRun) {
  std::unique_ptr<StalledUpload> u = StartStalledUpload({"--drain_seconds=0.5"});
  ASSERT_NE(u, nullptr);
  const absl::Time start = absl::Now();
  EXPECT_EQ(u->agent->Terminate(), 0);
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  absl::Status s = FromGrpcStatus(u->Finish());
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_EQ(
      s.message(),
      "this agent's drain for shutdown ran out (--drain_seconds=0.5) before the call ran: its "
      "handler did not run, and it may go elsewhere.");
  EXPECT_EQ(ReasonOf(s), ErrorReason::kAgentDraining) << s;
  EXPECT_TRUE(DidNotRun(s));
}

TEST(StreamIdleTest, ACallerThatStopsReadingIsEndedAndItsBudgetFreed) {
  constexpr int64_t kN = 24 << 20;  // results far past any flow-control window
  auto a = ChildProcess::Start(
      FARCALL_AGENT_BIN, {"--platform=cpu", "--listen=127.0.0.1:0", "--max_inflight_bytes=62914560",
                          "--stream_idle_timeout=1s"});
  ASSERT_TRUE(a.ok()) << a.status();
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  auto channel =
      grpc::CreateCustomChannel((*a)->address(), grpc::InsecureChannelCredentials(), args);
  auto stub = v1::Agent::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  auto stream = stub->Execute(&ctx);
  // Every byte and the half-close; then the results are never read.
  ASSERT_TRUE(stream->Write(CopyRequestU8(kN, kN)));
  ASSERT_TRUE(stream->WritesDone());
  ASSERT_TRUE(BudgetHeld((*a)->address(), kN)) << "the stalled call never held the budget";
  absl::Status next = CopyCall((*a)->address(), kN, absl::Seconds(20));
  EXPECT_TRUE(next.ok()) << next;
}

// A bare HTTP/2 client, for what gRPC's own client never does: take no
// answer, or send nothing at all.
class RawHttp2 {
 public:
  // Connects and sends the preface and SETTINGS; `window` is the stream
  // flow-control window it grants (0: the server may send no data).
  static std::unique_ptr<RawHttp2> Connect(int port, uint32_t window) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      if (fd >= 0) close(fd);
      return nullptr;
    }
    auto c = std::unique_ptr<RawHttp2>(new RawHttp2(fd));
    std::string settings;
    for (auto [id, value] : {std::pair<uint16_t, uint32_t>{2, 0}, {4, window}}) {
      settings += Be(id, 2) + Be(value, 4);
    }
    c->Send("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + Frame(4, 0, 0, settings));
    return c;
  }
  ~RawHttp2() { close(fd_); }

  // A unary call on stream 1: its headers, and its one message.
  void SendUnary(const std::string& path, int port, const std::string& message) {
    std::string block;
    for (auto [name, value] : {std::pair<std::string, std::string>{":method", "POST"},
                               {":scheme", "http"},
                               {":path", path},
                               {":authority", absl::StrCat("127.0.0.1:", port)},
                               {"content-type", "application/grpc"},
                               {"te", "trailers"}}) {
      // HPACK: a literal field, not indexed, new name, no Huffman coding.
      block += '\0' + std::string(1, static_cast<char>(name.size())) + name +
               std::string(1, static_cast<char>(value.size())) + value;
    }
    Send(Frame(1, 0x4, 1, block));
    Send(Frame(0, 0x1, 1, '\0' + Be(message.size(), 4) + message));
  }

  // Reads frames (acknowledging SETTINGS) until one of `type` arrives, for
  // up to `timeout`; true if it did.
  bool AwaitFrame(uint8_t type, absl::Duration timeout) {
    const absl::Time end = absl::Now() + timeout;
    for (;;) {
      std::string header;
      if (!Read(9, end, &header)) return false;
      const size_t length = (static_cast<uint8_t>(header[0]) << 16) |
                            (static_cast<uint8_t>(header[1]) << 8) |
                            static_cast<uint8_t>(header[2]);
      const uint8_t t = static_cast<uint8_t>(header[3]);
      const uint8_t flags = static_cast<uint8_t>(header[4]);
      std::string payload;
      if (!Read(length, end, &payload)) return false;
      if (t == type) return true;
      if (t == 4 && (flags & 0x1) == 0) Send(Frame(4, 0x1, 0, ""));
    }
  }

 private:
  explicit RawHttp2(int fd) : fd_(fd) {}

  static std::string Be(uint64_t v, int bytes) {
    std::string out(bytes, '\0');
    for (int i = bytes - 1; i >= 0; --i, v >>= 8) out[i] = static_cast<char>(v & 0xff);
    return out;
  }
  static std::string Frame(uint8_t type, uint8_t flags, uint32_t stream,
                           const std::string& payload) {
    return Be(payload.size(), 3) + std::string(1, static_cast<char>(type)) +
           std::string(1, static_cast<char>(flags)) + Be(stream, 4) + payload;
  }
  void Send(const std::string& bytes) {
    size_t done = 0;
    while (done < bytes.size()) {
      ssize_t n = write(fd_, bytes.data() + done, bytes.size() - done);
      if (n <= 0) return;
      done += static_cast<size_t>(n);
    }
  }
  bool Read(size_t n, absl::Time end, std::string* out) {
    out->resize(n);
    size_t got = 0;
    while (got < n) {
      pollfd p{fd_, POLLIN, 0};
      const int64_t ms = absl::ToInt64Milliseconds(end - absl::Now());
      if (ms <= 0 || poll(&p, 1, static_cast<int>(ms)) <= 0) return false;
      ssize_t r = read(fd_, out->data() + got, n - got);
      if (r <= 0) return false;
      got += static_cast<size_t>(r);
    }
    return true;
  }

  const int fd_;
};

TEST(StreamStallTest, AStalledCallHoldingMemoryOthersWaitForIsEndedSooner) {
  std::unique_ptr<StalledUpload> u =
      StartStalledUpload({"--stream_idle_timeout=60s", "--stream_stall_timeout=1s"});
  ASSERT_NE(u, nullptr);
  // Alone, the stalled call would hold the memory for a minute; with this
  // call waiting for it, it is ended after a second.
  const absl::Time start = absl::Now();
  absl::Status next = CopyCall(u->agent->address(), kStalledN, absl::Seconds(20));
  EXPECT_TRUE(next.ok()) << next;
  EXPECT_LT(absl::Now() - start, absl::Seconds(15));
  grpc::Status s = u->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << s.error_message();
  EXPECT_EQ(s.error_message(),
            "the caller sent nothing for 1s while other calls waited for its memory "
            "(--stream_stall_timeout); the call was ended.");
}

// Slow drip: `drippers` callers, each holding a copy of u8[4 MiB], on an
// agent whose budget fits `fit` of them (the rest wait for it), send one
// byte every half second (never silent for --stream_stall_timeout=2s).
// A small call comes behind them. Returns how long it waited, or an error;
// `ended` counts the drippers ended by --min_stream_bytes_per_second.
// With `tokens`, the drippers call with tokens_a, the small call with
// token_b.
struct Drip {
  int drippers = 4;
  int fit = 4;
  std::string tokens_file;  // empty: no tokens
  std::string token_a, token_b;
};
absl::StatusOr<absl::Duration> SmallCallBehindDrippers(const Drip& drip, int* ended) {
  constexpr int64_t kN = 4 << 20;
  constexpr int64_t kFootprint = 2 * kN + 4096 + 2 * 512;  // agent_call.cc's accounting
  std::vector<std::string> flags = {"--platform=cpu", "--listen=127.0.0.1:0",
                                    absl::StrCat("--max_inflight_bytes=", drip.fit * kFootprint),
                                    "--stream_stall_timeout=2s", "--stream_idle_timeout=60s"};
  if (!drip.tokens_file.empty()) flags.push_back("--tokens_file=" + drip.tokens_file);
  auto a = ChildProcess::Start(FARCALL_AGENT_BIN, flags);
  if (!a.ok()) return a.status();
  auto stub =
      v1::Agent::NewStub(grpc::CreateChannel((*a)->address(), grpc::InsecureChannelCredentials()));
  struct Dripper {
    grpc::ClientContext ctx;
    std::unique_ptr<grpc::ClientReaderWriter<v1::ExecuteRequest, v1::ExecuteResponse>> stream;
    grpc::Status status;
  };
  std::vector<std::unique_ptr<Dripper>> drippers;
  std::vector<std::thread> threads;
  for (int i = 0; i < drip.drippers; ++i) {
    auto d = std::make_unique<Dripper>();
    d->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(40));
    if (!drip.token_a.empty()) d->ctx.AddMetadata("authorization", "Bearer " + drip.token_a);
    d->stream = stub->Execute(&d->ctx);
    if (!d->stream->Write(CopyRequestU8(kN, 0))) return absl::InternalError("no stream");
    drippers.push_back(std::move(d));
  }
  absl::Notification first_done;
  std::atomic<bool> one_done{false};
  for (auto& d : drippers) {
    threads.emplace_back([d = d.get(), &first_done, &one_done] {
      // One byte every half second, for as long as the agent takes them
      // (bounded: the context's deadline ends the stream).
      for (uint64_t offset = 0; offset < 80; ++offset) {
        v1::ExecuteRequest r;
        AddChunk(&r, 0, offset, 1);
        if (!d->stream->Write(r)) break;
        absl::SleepFor(absl::Milliseconds(500));  // the adversary's pace
      }
      d->stream->WritesDone();
      v1::ExecuteResponse resp;
      while (d->stream->Read(&resp)) {
      }
      d->status = d->stream->Finish();
      if (!one_done.exchange(true)) first_done.Notify();
    });
  }
  const bool held = BudgetHeld((*a)->address(), 4, drip.token_b);
  const absl::Time start = absl::Now();
  absl::Status small = held ? CopyCall((*a)->address(), 4, absl::Seconds(20), drip.token_b)
                            : absl::InternalError("the drippers never held the budget");
  const absl::Duration waited = absl::Now() - start;
  // Drippers admitted after the small call went are not judged (nobody
  // waits for their memory): once one has seen its end, the others are
  // cancelled here rather than left to their deadline.
  first_done.WaitForNotificationWithTimeout(absl::Seconds(10));
  for (auto& d : drippers) d->ctx.TryCancel();
  for (auto& t : threads) t.join();
  *ended = 0;
  for (auto& d : drippers) {
    if (d->status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED &&
        d->status.error_message().find("(--min_stream_bytes_per_second)") != std::string::npos) {
      ++*ended;
    }
  }
  if (!small.ok()) return small;
  return waited;
}

// Callers that fill the budget, then drip, must not starve a small call
// behind them: while it waits they are held to
// --min_stream_bytes_per_second and ended.
TEST(StreamStallTest, DrippingCallersAreEndedWhenOthersWaitForTheirMemory) {
  int ended = 0;
  absl::StatusOr<absl::Duration> waited = SmallCallBehindDrippers(Drip{}, &ended);
  ASSERT_TRUE(waited.ok()) << waited.status();
  EXPECT_LT(*waited, absl::Seconds(20));
  EXPECT_GE(ended, 1);
}

// One tenant's drippers hold the whole budget and queue more of theirs
// behind it. Another tenant's small call does not wait behind those: the
// budget's queue serves tenants in turn, so it goes as soon as the first
// dripper is ended, within --stream_stall_timeout (2 s) and one second.
TEST(StreamStallTest, AnotherTenantsDrippersDelayASmallCallOneStallWindowAtMost) {
  char dir[] = "/tmp/farcall-drip-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  Drip drip;
  drip.fit = 2;  // two hold the budget, two more wait for it
  drip.tokens_file = std::string(dir) + "/tokens";
  drip.token_a = "dripper-token-0123456789";
  drip.token_b = "small-token-0123456789";
  std::ofstream(drip.tokens_file) << drip.token_a << " * tenant=a\n"
                                  << drip.token_b << " * tenant=b\n";
  int ended = 0;
  absl::StatusOr<absl::Duration> waited = SmallCallBehindDrippers(drip, &ended);
  ASSERT_TRUE(waited.ok()) << waited.status();
  std::printf("the small call waited %s behind the other tenant's drippers\n",
              absl::FormatDuration(*waited).c_str());
  EXPECT_LT(*waited, absl::Seconds(3));
  EXPECT_GE(ended, 1);
}

// --max_call_seconds holds in every phase, not only while the handler runs:
// a call whose client keeps it uploading, or that waits for memory, ends
// at the limit (the wait itself: device_agents/idle_watchdog_test.cc).
TEST(MaxCallTimeTest, AppliesWhileUploadingAndWaitingForMemory) {
  std::unique_ptr<StalledUpload> u = StartStalledUpload(
      {"--stream_idle_timeout=60s", "--stream_stall_timeout=0", "--max_call_seconds=3"});
  ASSERT_NE(u, nullptr);
  // A second call that sends its header alone: it waits for the stalled
  // call's memory, then for its own bytes.
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  auto queued = u->stub->Execute(&ctx);
  ASSERT_TRUE(queued->Write(CopyRequestU8(kStalledN, 0)));
  const absl::Time start = absl::Now();
  const std::string limit =
      "the call ran past this agent's limit of 3s per call (--max_call_seconds).";
  grpc::Status s = u->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << s.error_message();
  EXPECT_EQ(s.error_message(), limit);
  v1::ExecuteResponse resp;
  while (queued->Read(&resp)) {
  }
  s = queued->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << s.error_message();
  EXPECT_EQ(s.error_message(), limit);
  EXPECT_LT(absl::Now() - start, absl::Seconds(15));
}

TEST(UnaryIdleTest, AnAnswerNobodyTakesIsDroppedAfterTheIdleTimeout) {
  auto a = ChildProcess::Start(
      FARCALL_AGENT_BIN, {"--platform=cpu", "--listen=127.0.0.1:0", "--stream_idle_timeout=1s"});
  ASSERT_TRUE(a.ok()) << a.status();
  // A window of 0: the agent can send none of its answer. (A small call: its
  // one DATA frame stays under HTTP/2's smallest frame and window sizes.)
  auto h2 = RawHttp2::Connect((*a)->port(), 0);
  ASSERT_NE(h2, nullptr);
  h2->SendUnary("/farcall.v1.Agent/Call", (*a)->port(),
                CopyRequestU8(1024, 1024).SerializeAsString());
  // RST_STREAM: the agent dropped the call, and the answer with it.
  EXPECT_TRUE(h2->AwaitFrame(3, absl::Seconds(20)))
      << "the agent kept an answer nobody took past its idle timeout";
}

TEST(ConnectionAgeTest, AnOldConnectionIsAskedToGoAway) {
  auto a = ChildProcess::Start(
      FARCALL_AGENT_BIN, {"--platform=cpu", "--listen=127.0.0.1:0", "--max_connection_age=1s"});
  ASSERT_TRUE(a.ok()) << a.status();
  auto h2 = RawHttp2::Connect((*a)->port(), 65535);
  ASSERT_NE(h2, nullptr);
  EXPECT_TRUE(h2->AwaitFrame(7, absl::Seconds(20))) << "no GOAWAY on an aged connection";
  // Clients reconnect by themselves: calls go on.
  auto client = Client::Connect((*a)->address());
  ASSERT_TRUE(client.ok());
  std::vector<uint8_t> x(16, 3);
  CallRequest req;
  req.platform = "cpu";
  req.handler = "copy";
  req.args = {Arg::In(TensorSpec{DType::kU8, {16}}, x.data())};
  req.results = {TensorSpec{DType::kU8, {16}}};
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE((*client)->Call(req).ok());
  }
}

TEST(ConnectionAgeTest, BadValuesAreRefusedAtStartUp) {
  ::farcall::testing::CommandResult r = ::farcall::testing::RunCommand(
      absl::StrCat(FARCALL_AGENT_BIN, " --listen=127.0.0.1:0 --max_connection_age=-1s"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.output,
              ::testing::HasSubstr("--max_connection_age must be between 0 and 8760h; got -1s."));
}

TEST(MaxSleepTest, TheTestHandlerSleepHonoursItsCap) {
  auto a = ChildProcess::Start(FARCALL_AGENT_BIN,
                               {"--platform=cpu", "--listen=127.0.0.1:0", "--max_sleep=1s"});
  ASSERT_TRUE(a.ok()) << a.status();
  auto client = Client::Connect((*a)->address());
  ASSERT_TRUE(client.ok());
  CallRequest sleep;
  sleep.platform = "cpu";
  sleep.handler = "sleep";
  sleep.attributes["ms"] = int64_t{5000};
  absl::Status s = (*client)->Call(sleep).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "sleep: attribute 'ms' is 5000, over this agent's limit of 1000 (--max_sleep)");
  sleep.attributes["ms"] = int64_t{10};
  EXPECT_TRUE((*client)->Call(sleep).ok());
}

}  // namespace
}  // namespace farcall
