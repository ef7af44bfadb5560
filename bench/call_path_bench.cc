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
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "benchmark/benchmark.h"
#include "client/call_codec.h"
#include "core/capability.h"
#include "core/tokens.h"
#include "core/wire/frame_codec.h"
#include "device_agents/agent_call.h"
#include "device_agents/agent_metrics.h"
#include "device_agents/call_ledger.h"
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

// Ed25519: what the agent pays for a capability it has not seen (signature
// checked), for one it verified before (the cache), and what the router
// pays to mint one fresh or hand out one it minted lately.
void BM_CapabilityVerify(benchmark::State& st) {
  CapabilitySigner signer =
      CapabilitySigner::FromPem(NewCapabilitySigningKeyPem(), "bench").value();
  const bool cached = st.range(0) != 0;
  std::vector<std::string> blobs;
  for (int i = 0; i < (cached ? 1 : 4096); ++i) {
    blobs.push_back(signer.Mint(
        {absl::StrCat("token:", i), "copy", "cpu-agent-50051", absl::Now() + absl::Minutes(5)}));
  }
  auto fresh = [&] {
    return std::make_unique<CapabilityVerifier>(
        CapabilityVerifier::FromPem(signer.public_key_pem(), "bench").value());
  };
  std::unique_ptr<CapabilityVerifier> verifier = fresh();
  size_t i = 0;
  for (auto _ : st) {
    if (!cached && i > 0 && i % blobs.size() == 0) {
      // Every blob seen: a fresh verifier, so that no check is cached.
      st.PauseTiming();
      verifier = fresh();
      st.ResumeTiming();
    }
    absl::StatusOr<Capability> c = verifier->Verify(blobs[i++ % blobs.size()], absl::Now());
    benchmark::DoNotOptimize(CheckCapabilityScope(*c, "copy", "cpu-agent-50051"));
  }
}
BENCHMARK(BM_CapabilityVerify)->ArgName("cached")->Arg(0)->Arg(1);

void BM_CapabilityMint(benchmark::State& st) {
  CapabilitySigner signer =
      CapabilitySigner::FromPem(NewCapabilitySigningKeyPem(), "bench").value();
  for (auto _ : st) {
    benchmark::DoNotOptimize(signer.Mint(
        {"token:0a1b2c3d4e5f", "copy", "cpu-agent-50051", absl::Now() + absl::Minutes(5)}));
  }
}
BENCHMARK(BM_CapabilityMint);

void BM_CapabilityMintFor(benchmark::State& st) {
  CapabilitySigner signer =
      CapabilitySigner::FromPem(NewCapabilitySigningKeyPem(), "bench").value();
  for (auto _ : st) {
    benchmark::DoNotOptimize(signer.MintFor("token:0a1b2c3d4e5f", "copy", "cpu-agent-50051"));
  }
}
BENCHMARK(BM_CapabilityMintFor);

// The exactly-once ledger when ids alone fill it (defect: each Begin
// rescanned every id it held). Per-call cost at 1,000 and at 100,000 ids
// held: the two should match.
void BM_LedgerBeginWhenFull(benchmark::State& st) {
  agent::CallLedger::Options o;
  const int64_t held = st.range(0);
  o.max_bytes = held * (agent::CallLedger::kEntryOverheadBytes + 2 * 12 + 1);
  agent::CallLedger ledger(o);
  const absl::Time t0 = absl::Now();
  for (int64_t i = 0; i < held; ++i) {
    agent::CallKey k{"", absl::StrCat("id-", 100000000 + i), "d"};
    ledger.Begin(k, t0);
    ledger.Ran(k, absl::OkStatus(), nullptr, t0);
  }
  int64_t i = 0;
  for (auto _ : st) {
    agent::CallKey k{"", absl::StrCat("nx-", 100000000 + i++), "d"};
    benchmark::DoNotOptimize(ledger.Begin(k, t0).run);
  }
}
BENCHMARK(BM_LedgerBeginWhenFull)->ArgName("ids_held")->Arg(1000)->Arg(100000);

}  // namespace
}  // namespace farcall

BENCHMARK_MAIN();
