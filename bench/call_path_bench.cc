// What one small call costs, piece by piece, in-process (no RPC): the
// client's header build and validation, its frame encoding and answer
// decoding, the agent's header decoding, validation and device pick, the
// whole agent side of a 64-byte copy, one metrics label look-up, one
// hand-off to a worker thread and back, and a caller's credentials checked
// (a token, or a capability). The RPC itself is what bench/run.sh
// measures against a bare gRPC echo; docs/performance.md puts the two side
// by side.
//   build/bench/call_path_bench [--benchmark_repetitions=3]
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/synchronization/notification.h"
#include "benchmark/benchmark.h"
#include "client/call_codec.h"
#include "core/capability.h"
#include "core/tokens.h"
#include "core/wire/frame_codec.h"
#include "device_agents/agent_call.h"
#include "device_agents/agent_metrics.h"
#include "device_agents/cpu/builtin_handlers.h"
#include "device_agents/worker_pool.h"

namespace farcall {
namespace {

using client_internal::PreparedCall;

// A 64-byte copy, as the client states it.
struct SmallCall {
  std::vector<uint8_t> x = std::vector<uint8_t>(64, 7);
  TensorSpec spec{DType::kU8, {64}};
  CallRequest Request() {
    CallRequest r;
    r.handler = "copy";
    r.args = {Arg::In(spec, x.data())};
    r.results = {spec};
    return r;
  }
};

// An agent's state with a cpu device and the built-ins, as a server has it.
agent::AgentState& Agent() {
  static agent::AgentState* state = [] {
    auto* s = new agent::AgentState;
    s->config.platform = Platform::kCpu;
    s->config.agent_id = "bench-agent";
    auto backend = agent::OpenBackend(Platform::kCpu, s->config.backend);
    if (!backend.ok()) std::abort();
    s->backend = *std::move(backend);
    s->admission = std::make_unique<agent::Admission>(int64_t{1} << 30);
    for (const FarcallHandlerDef& d : agent::cpu::BuiltinHandlers()) {
      if (!s->registry.Register(d, "builtin").ok()) std::abort();
    }
    return s;
  }();
  return *state;
}

grpc::ByteBuffer RequestFrame(const PreparedCall& p) {
  grpc::ByteBuffer frame;
  client_internal::RequestWriter(p, 0, nullptr).Next(&frame);
  return frame;
}

void BM_ClientPrepare(benchmark::State& st) {
  SmallCall c;
  const CallRequest r = c.Request();
  for (auto _ : st) benchmark::DoNotOptimize(client_internal::Prepare(r, {}));
}
BENCHMARK(BM_ClientPrepare);

void BM_ClientEncodeRequest(benchmark::State& st) {
  SmallCall c;
  const PreparedCall p = *client_internal::Prepare(c.Request(), {});
  for (auto _ : st) benchmark::DoNotOptimize(RequestFrame(p));
}
BENCHMARK(BM_ClientEncodeRequest);

void BM_AgentBegin(benchmark::State& st) {
  SmallCall c;
  const grpc::ByteBuffer frame = RequestFrame(*client_internal::Prepare(c.Request(), {}));
  for (auto _ : st) {
    agent::AgentCall call(Agent());
    benchmark::DoNotOptimize(call.Begin(frame));
  }
}
BENCHMARK(BM_AgentBegin);

// Everything the agent does for one unary call but the RPC and the hops:
// the answer's frame.
grpc::ByteBuffer AnswerOnAgent(const grpc::ByteBuffer& frame) {
  agent::AgentCall call(Agent());
  agent::CancellationToken cancel;
  if (!call.Begin(frame).ok()) std::abort();
  call.Admitted();
  if (!call.Allocate().ok() || !call.OnRequestFrame(frame).ok() || !call.EndOfInputs().ok() ||
      !call.Run(cancel).ok()) {
    std::abort();
  }
  grpc::ByteBuffer answer;
  if (!call.NextResponseFrame(0, &answer).ok()) std::abort();
  call.RecordOutcome(absl::OkStatus(), &answer);
  return answer;
}

void BM_AgentWholeCall(benchmark::State& st) {
  SmallCall c;
  const grpc::ByteBuffer frame = RequestFrame(*client_internal::Prepare(c.Request(), {}));
  for (auto _ : st) benchmark::DoNotOptimize(AnswerOnAgent(frame));
}
BENCHMARK(BM_AgentWholeCall);

void BM_ClientDecodeAnswer(benchmark::State& st) {
  SmallCall c;
  const PreparedCall p = *client_internal::Prepare(c.Request(), {});
  const grpc::ByteBuffer answer = AnswerOnAgent(RequestFrame(p));
  for (auto _ : st) {
    client_internal::ResponseReader reader(p);
    if (!reader.OnFrame(answer).ok()) std::abort();
    benchmark::DoNotOptimize(reader.Finish());
  }
}
BENCHMARK(BM_ClientDecodeAnswer);

void BM_MetricLabelLookup(benchmark::State& st) {
  for (auto _ : st) agent::Metrics().calls.With({"cpu", "copy", "OK"}).Increment();
}
BENCHMARK(BM_MetricLabelLookup);

// One hop to a worker and the wait for it, as a unary call makes twice
// (to run the handler, and back to gRPC's thread to finish).
void BM_WorkerHandoff(benchmark::State& st) {
  agent::WorkerPool pool(2);
  for (auto _ : st) {
    absl::Notification done;
    pool.Submit([&] { done.Notify(); });
    done.WaitForNotification();
  }
}
BENCHMARK(BM_WorkerHandoff);

// What an agent spends on a caller's credentials: a token looked up in a
// tokens file of 16 lines, or a capability verified (HMAC-SHA256) and its
// scope checked; and what a router spends minting one.
void BM_TokenAuthorize(benchmark::State& st) {
  std::string file;
  for (int i = 0; i < 16; ++i) file += "token-of-tenant-" + std::to_string(100 + i) + " *\n";
  TokenTable tokens = TokenTable::Parse(file, "bench").value();
  std::string principal;
  for (auto _ : st) {
    benchmark::DoNotOptimize(tokens.Authorize("Bearer token-of-tenant-115", "copy", &principal));
  }
}
BENCHMARK(BM_TokenAuthorize);

void BM_CapabilityVerify(benchmark::State& st) {
  CapabilityKey key = CapabilityKey::FromSecret(std::string(48, 'k'), "bench").value();
  const std::string blob =
      key.Mint({"token:0a1b2c3d4e5f", "copy", "cpu-agent-50051", absl::Now() + absl::Minutes(5)});
  for (auto _ : st) {
    absl::StatusOr<Capability> c = key.Verify(blob, absl::Now());
    benchmark::DoNotOptimize(CheckCapabilityScope(*c, "copy", "cpu-agent-50051"));
  }
}
BENCHMARK(BM_CapabilityVerify);

void BM_CapabilityMint(benchmark::State& st) {
  CapabilityKey key = CapabilityKey::FromSecret(std::string(48, 'k'), "bench").value();
  for (auto _ : st) {
    benchmark::DoNotOptimize(key.Mint(
        {"token:0a1b2c3d4e5f", "copy", "cpu-agent-50051", absl::Now() + absl::Minutes(5)}));
  }
}
BENCHMARK(BM_CapabilityMint);

}  // namespace
}  // namespace farcall

BENCHMARK_MAIN();
