// farcall: the command-line client.
//
//   farcall call HANDLER [ARG ...] --target=HOST:PORT --platform=cpu
//       --results='float32[8]' [--aliases=1:0] [--attr=alpha=2.0] [--out_dir=DIR]
//   farcall agents --target=ROUTER
//   farcall health --target=HOST:PORT
//   farcall describe --target=AGENT
//   farcall bench --target=HOST:PORT [--handler=copy] [--bytes=N] [--calls=N]
//       [--concurrency=C] [--alias] [--shm] [--json]
//
// ARG is a .npy file or SPEC[:FILL], such as float32[4,8]:iota. Errors print
// the gRPC code and message and exit 1.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/cli/bench.h"
#include "client/cli/npy.h"
#include "client/cli/tensor_args.h"
#include "core/process.h"
#include "core/tokens.h"
#include "farcall/client.h"

ABSL_FLAG(std::string, target, "127.0.0.1:50050", "router or agent address");
ABSL_FLAG(std::string, platform, "cpu", "platform to run on");
ABSL_FLAG(std::string, results, "", "result specs, separated by ';', e.g. 'float32[4,8];int32[]'");
ABSL_FLAG(std::vector<std::string>, aliases, {},
          "call: input_output_aliases as IN:OUT, comma-separated");
ABSL_FLAG(std::vector<std::string>, attr, {},
          "attributes NAME=VALUE, comma-separated (int, float, true/false, str:TEXT)");
ABSL_FLAG(std::string, out_dir, "", "write each result to DIR/result<i>.npy");
ABSL_FLAG(int, print, 8, "elements to print per tensor");
ABSL_FLAG(double, timeout_s, 60, "deadline of the call in seconds");
ABSL_FLAG(int64_t, chunk_bytes, 1 << 20, "tensor bytes per message");
ABSL_FLAG(std::string, transport, "auto",
          "call, bench: how the tensors travel: auto, grpc, shm (same-host shared memory) or ucx");
ABSL_FLAG(std::string, rpc, "auto",
          "call, bench: the gRPC call's shape: auto, unary (one message each way) or stream");
ABSL_FLAG(bool, via_router, false,
          "call, bench: with a router as --target, send the tensors through it instead of "
          "asking it for an agent and calling that agent directly");
ABSL_FLAG(bool, wait_for_ready, false,
          "wait, within --timeout_s, for a target that cannot be reached yet (an agent "
          "restarting) instead of failing at once");
ABSL_FLAG(int64_t, busy_poll_us, 0,
          "call, bench: poll this many microseconds for a small call's answer before "
          "sleeping (CallOptions::busy_poll: lower latency, one core spent meanwhile)");
ABSL_FLAG(int, retries, 0,
          "call, bench: send a failed call again to the same target up to this many times where "
          "it may go again (CallOptions::retries); a router's next agent, and a router that "
          "drains, are tried whatever it says");
ABSL_FLAG(bool, keep_aliased_args, false,
          "call, bench: keep a copy of each aliased arg, so that a call whose result had begun "
          "to land in it can still go again (one copy per call)");
ABSL_FLAG(bool, refresh, true, "agents: probe every agent before listing");
ABSL_FLAG(std::string, handler, "copy",
          "bench: copy, crc32c or sum (sum and crc32c send the bytes one way)");
ABSL_FLAG(int64_t, bytes, 1 << 20, "bench: arg bytes per call");
ABSL_FLAG(int64_t, calls, 100, "bench: timed calls");
ABSL_FLAG(int, concurrency, 1, "bench: calls in flight at once");
ABSL_FLAG(bool, stagger, false,
          "bench: start the workers a fraction of a call apart (one call's upload then overlaps "
          "another's download on a link)");
ABSL_FLAG(int, warmup, 1, "bench: untimed calls first");
ABSL_FLAG(bool, alias, false, "bench: copy in place, {0: 0}");
ABSL_FLAG(bool, json, false, "bench: end with one JSON line");
ABSL_FLAG(bool, shm, false, "bench: same-host shared memory (target: a local agent)");
ABSL_FLAG(std::string, tls_ca, "", "TLS: verify the server against this PEM CA");
ABSL_FLAG(std::string, tls_cert, "", "TLS: a PEM client certificate, for servers that require one");
ABSL_FLAG(std::string, tls_key, "", "TLS: the PEM private key of --tls_cert");
ABSL_FLAG(std::string, tls_server_name, "",
          "TLS: check the target's certificate against this name instead of its address");
ABSL_FLAG(std::string, agent_tls_server_name, "",
          "TLS, a router as --target: check the certificates of the agents it names against "
          "this name when calling them directly (as the router's --agent_tls_server_name)");
ABSL_FLAG(bool, allow_insecure_tokens, false,
          "send the token without TLS to a target beyond this host (a trusted network only)");
ABSL_FLAG(std::string, token_file, "",
          "a file holding the bearer token to send (a file, so that it shows in no process list)");

namespace {

// --transport, --rpc, --busy_poll_us, --retries and --keep_aliased_args into
// `opts`; INVALID_ARGUMENT for any other value.
absl::Status ApplyTransportFlags(farcall::CallOptions& opts) {
  const std::string transport = absl::GetFlag(FLAGS_transport);
  std::optional<farcall::Transport> t = farcall::TransportNamed(transport);
  if (!t.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--transport must be auto, grpc, shm or ucx; got '", transport, "'",
                     farcall::RpcNamed(transport).has_value() && transport != "auto"
                         ? " (the RPC's shape is --rpc=" + transport + ")."
                         : "."));
  }
  opts.transport = *t;
  const std::string rpc = absl::GetFlag(FLAGS_rpc);
  std::optional<farcall::Rpc> r = farcall::RpcNamed(rpc);
  if (!r.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--rpc must be auto, unary or stream; got '", rpc, "'."));
  }
  opts.rpc = *r;
  const int64_t busy_poll_us = absl::GetFlag(FLAGS_busy_poll_us);
  if (busy_poll_us < 0 || busy_poll_us > 1000000) {
    return absl::InvalidArgumentError(
        absl::StrCat("--busy_poll_us must be 0 to 1000000; got ", busy_poll_us, "."));
  }
  opts.busy_poll = absl::Microseconds(busy_poll_us);
  const int retries = absl::GetFlag(FLAGS_retries);
  if (retries < 0 || retries > 1000) {
    return absl::InvalidArgumentError(
        absl::StrCat("--retries must be 0 to 1000; got ", retries, "."));
  }
  opts.retries = retries;
  opts.keep_aliased_args = absl::GetFlag(FLAGS_keep_aliased_args);
  return absl::OkStatus();
}

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "farcall: %s: %s\n", absl::StatusCodeToString(s.code()).c_str(),
               std::string(s.message()).c_str());
  return 1;
}

std::string Ms(absl::Duration d) {
  return absl::StrFormat("%.3f ms", absl::ToDoubleMilliseconds(d));
}

absl::StatusOr<std::unique_ptr<farcall::Client>> Connect() {
  farcall::ClientOptions options;
  options.tls_ca = absl::GetFlag(FLAGS_tls_ca);
  options.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  options.tls_key = absl::GetFlag(FLAGS_tls_key);
  options.tls_server_name = absl::GetFlag(FLAGS_tls_server_name);
  options.agent_tls_server_name = absl::GetFlag(FLAGS_agent_tls_server_name);
  const std::string token_file = absl::GetFlag(FLAGS_token_file);
  if (!token_file.empty()) {
    absl::StatusOr<std::string> token = farcall::ReadTokenFile(token_file);
    if (!token.ok()) return token.status();
    options.token = *std::move(token);
  }
  options.allow_insecure_tokens = absl::GetFlag(FLAGS_allow_insecure_tokens);
  return farcall::Client::Connect(absl::GetFlag(FLAGS_target), options);
}

int RunCall(const std::vector<char*>& pos) {
  using farcall::cli::HostTensor;
  if (pos.size() < 3) {
    return Fail(
        absl::InvalidArgumentError("usage: farcall call HANDLER [ARG ...] --results=SPECS"));
  }
  farcall::CallRequest req;
  req.handler = pos[2];
  req.platform = absl::GetFlag(FLAGS_platform);
  std::vector<HostTensor> inputs;
  for (size_t i = 3; i < pos.size(); ++i) {
    absl::StatusOr<HostTensor> t = farcall::cli::ParseTensorArg(pos[i]);
    if (!t.ok()) return Fail(t.status());
    inputs.push_back(*std::move(t));
  }
  for (const std::string& a : absl::GetFlag(FLAGS_aliases)) {
    auto p = farcall::cli::ParseAlias(a);
    if (!p.ok()) return Fail(p.status());
    req.aliases[p->first] = p->second;
  }
  for (HostTensor& t : inputs) {
    // Every arg may be aliased: the CLI owns the memory anyway.
    req.args.push_back(farcall::Arg::InOut(t.spec, t.bytes.data()));
  }
  const std::string results = absl::GetFlag(FLAGS_results);
  if (!results.empty()) {
    for (absl::string_view s : absl::StrSplit(results, ';', absl::SkipEmpty())) {
      auto spec = farcall::ParseTensorSpec(s);
      if (!spec.ok()) return Fail(spec.status());
      req.results.push_back(*spec);
    }
  }
  for (const std::string& a : absl::GetFlag(FLAGS_attr)) {
    auto kv = farcall::cli::ParseAttr(a);
    if (!kv.ok()) return Fail(kv.status());
    std::visit([&](const auto& v) { req.attributes[kv->first] = v; }, kv->second);
  }
  farcall::CallOptions opts;
  opts.timeout = absl::Seconds(absl::GetFlag(FLAGS_timeout_s));
  opts.chunk_bytes = absl::GetFlag(FLAGS_chunk_bytes);
  opts.via_router = absl::GetFlag(FLAGS_via_router);
  opts.wait_for_ready = absl::GetFlag(FLAGS_wait_for_ready);
  if (absl::Status s = ApplyTransportFlags(opts); !s.ok()) return Fail(s);

  const std::string out_dir = absl::GetFlag(FLAGS_out_dir);
  if (!out_dir.empty()) {
    // Made before the call, so that a bad directory costs no call.
    std::error_code ec;
    std::filesystem::create_directories(out_dir, ec);
    if (ec) {
      return Fail(absl::InvalidArgumentError(
          absl::StrCat("--out_dir: cannot create ", out_dir, ": ", ec.message())));
    }
  }
  const int n = absl::GetFlag(FLAGS_print);
  std::fflush(stdout);
  std::printf("farcall call %s on %s via %s\n", req.handler.c_str(), req.platform.c_str(),
              absl::GetFlag(FLAGS_target).c_str());
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::string note;
    for (const auto& [in, out] : req.aliases)
      if (in == i) note = absl::StrCat("  (aliased to results[", out, "])");
    std::printf("  args[%zu]    %s%s\n", i,
                farcall::cli::FormatTensor(inputs[i].spec, inputs[i].bytes.data(),
                                           inputs[i].bytes.size(), n)
                    .c_str(),
                note.c_str());
  }
  // The CLI prints the inputs before the call because aliased ones change.
  auto client = Connect();
  if (!client.ok()) return Fail(client.status());
  absl::Time start = absl::Now();
  absl::StatusOr<farcall::CallResult> r = (*client)->Call(req, opts);
  absl::Duration took = absl::Now() - start;
  if (!r.ok() && r.status().code() == absl::StatusCode::kInvalidArgument && req.results.empty()) {
    std::fprintf(stderr, "(the call declared no results: --results='float32[8]' declares one)\n");
  }
  if (!r.ok()) return Fail(r.status());
  std::printf("  -> agent %s (%s), %s%s, %s (queue %s, transfer %s, execute %s)\n",
              r->agent_id.c_str(), r->platform.c_str(),
              r->transport == farcall::Transport::kShm   ? "shared memory"
              : r->transport == farcall::Transport::kUcx ? "UCX"
              : r->rpc == farcall::Rpc::kUnary           ? "unary Call"
                                                         : "streamed Execute",
              r->via_router ? " through the router" : "", Ms(took).c_str(),
              Ms(r->queue_time).c_str(), Ms(r->transfer_time).c_str(), Ms(r->execute_time).c_str());
  for (size_t o = 0; o < r->results.size(); ++o) {
    const farcall::ResultTensor& t = r->results[o];
    std::string note;
    for (const auto& [in, out] : req.aliases)
      if (out == o) note = absl::StrCat("  (written in place into args[", in, "])");
    std::printf("  results[%zu] %s%s\n", o,
                farcall::cli::FormatTensor(t.spec, t.data, t.size, n).c_str(), note.c_str());
    if (!out_dir.empty()) {
      std::string path = absl::StrCat(out_dir, "/result", o, ".npy");
      absl::Status s = farcall::cli::WriteNpy(path, t.spec, t.data, t.size);
      if (!s.ok()) return Fail(s);
      std::printf("             saved to %s\n", path.c_str());
    }
  }
  return 0;
}

int RunAgents() {
  auto client = Connect();
  if (!client.ok()) return Fail(client.status());
  auto list = (*client)->ListAgents(absl::GetFlag(FLAGS_refresh));
  if (!list.ok()) return Fail(list.status());
  std::printf("%-22s %-20s %-8s %-12s %8s %8s  %s\n", "ADDRESS", "AGENT", "PLATFORM", "HEALTH",
              "INFLIGHT", "CALLS", "HANDLERS / LAST ERROR");
  for (const farcall::AgentStatus& a : *list) {
    std::vector<std::string> handlers;
    for (const auto& h : a.info.handlers) handlers.push_back(h.name);
    std::string tail = a.last_error.empty() ? absl::StrJoin(handlers, ",") : a.last_error;
    std::printf("%-22s %-20s %-8s %-12s %8lld %8llu  %s\n", a.address.c_str(),
                a.info.agent_id.c_str(), a.info.platform.c_str(), farcall::HealthName(a.health),
                static_cast<long long>(a.inflight_calls),
                static_cast<unsigned long long>(a.calls_total), tail.c_str());
  }
  return 0;
}

int RunHealth() {
  auto client = Connect();
  if (!client.ok()) return Fail(client.status());
  absl::Status s = (*client)->Health();
  if (!s.ok()) return Fail(s);
  std::printf("%s: SERVING\n", absl::GetFlag(FLAGS_target).c_str());
  return 0;
}

int RunDescribe() {
  auto client = Connect();
  if (!client.ok()) return Fail(client.status());
  auto info = (*client)->Describe();
  if (!info.ok()) return Fail(info.status());
  std::printf("agent %s, platform %s, version %s, max call %lld bytes\n", info->agent_id.c_str(),
              info->platform.c_str(), info->version.c_str(),
              static_cast<long long>(info->max_call_bytes));
  std::printf("  shared memory: %s\n  ucx: %s\n",
              info->shm_socket.empty() ? "not offered" : "offered",
              info->offers_ucx ? "offered" : "not offered");
  for (const auto& d : info->devices) {
    std::printf("  device %d: %s, %lld bytes\n", d.ordinal, d.name.c_str(),
                static_cast<long long>(d.memory_bytes));
  }
  for (const auto& h : info->handlers) {
    std::printf("  handler %-20s %s%s\n", h.name.c_str(), h.source.c_str(),
                h.command_buffer_compatible ? " (command_buffer_compatible)" : "");
  }
  return 0;
}

int RunBenchCommand() {
  auto client = Connect();
  if (!client.ok()) return Fail(client.status());
  farcall::cli::BenchOptions o;
  o.platform = absl::GetFlag(FLAGS_platform);
  o.handler = absl::GetFlag(FLAGS_handler);
  o.bytes = absl::GetFlag(FLAGS_bytes);
  o.calls = absl::GetFlag(FLAGS_calls);
  o.concurrency = absl::GetFlag(FLAGS_concurrency);
  o.stagger = absl::GetFlag(FLAGS_stagger);
  o.warmup = absl::GetFlag(FLAGS_warmup);
  o.alias = absl::GetFlag(FLAGS_alias);
  o.shm = absl::GetFlag(FLAGS_shm);
  o.progress = isatty(fileno(stderr)) != 0;
  o.call.timeout = absl::Seconds(absl::GetFlag(FLAGS_timeout_s));
  o.call.chunk_bytes = absl::GetFlag(FLAGS_chunk_bytes);
  o.call.via_router = absl::GetFlag(FLAGS_via_router);
  o.call.wait_for_ready = absl::GetFlag(FLAGS_wait_for_ready);
  if (absl::Status s = ApplyTransportFlags(o.call); !s.ok()) return Fail(s);
  if (o.call.transport == farcall::Transport::kShm) o.shm = true;
  if (o.shm && o.call.transport != farcall::Transport::kAuto &&
      o.call.transport != farcall::Transport::kShm) {
    return Fail(absl::InvalidArgumentError("--shm is --transport=shm; give one or the other."));
  }
  std::printf("farcall bench %s on %s via %s: %lld calls of %lld bytes, concurrency %d%s%s\n",
              o.handler.c_str(), o.platform.c_str(), absl::GetFlag(FLAGS_target).c_str(),
              static_cast<long long>(o.calls), static_cast<long long>(o.bytes), o.concurrency,
              o.alias ? ", aliased" : "", o.shm ? ", shared memory" : "");
  std::fflush(stdout);
  absl::StatusOr<farcall::cli::BenchReport> r = farcall::cli::RunBench(**client, o);
  if (!r.ok()) return Fail(r.status());
  std::printf("%s", r->Table().c_str());
  if (absl::GetFlag(FLAGS_json)) std::printf("%s\n", r->Json().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "farcall call|agents|health|describe|bench [flags]\n"
      "  farcall call axpy float32[8]:iota float32[8]:ones --results='float32[8]' "
      "--aliases=1:0 --attr=alpha=2.0 --target=127.0.0.1:50050");
  farcall::InitFarcallProcess();
  std::vector<char*> pos = absl::ParseCommandLine(argc, argv);
  const std::string cmd = pos.size() > 1 ? pos[1] : "";
  if (cmd == "call") return RunCall(pos);
  if (cmd == "agents") return RunAgents();
  if (cmd == "health") return RunHealth();
  if (cmd == "describe") return RunDescribe();
  if (cmd == "bench") return RunBenchCommand();
  std::fprintf(stderr, "%s\n", std::string(absl::ProgramUsageMessage()).c_str());
  return 2;
}
