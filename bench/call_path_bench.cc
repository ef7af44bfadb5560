// What one small call costs, piece by piece, in-process (no RPC): the
// client's header build and validation, its frame encoding and answer
// decoding, the agent's header decoding, validation and device pick, the
// whole agent side of a 64-byte copy, one metrics label look-up, and one
// hand-off to a worker thread and back. The RPC itself is what bench/run.sh
// measures against a bare gRPC echo; docs/performance.md puts the two side
// by side.
//   build/bench/call_path_bench [--benchmark_repetitions=3]
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/synchronization/notification.h"
#include "benchmark/benchmark.h"
#include "client/call_codec.h"
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

}  // namespace
}  // namespace farcall

BENCHMARK_MAIN();
