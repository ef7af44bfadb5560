// Exact results or an error, whatever moment an agent dies or drains at.
//
// Each cell starts real agents whose --inject_faults names the phase of a
// call at which the first agent to reach it ends (SIGKILL, or SIGTERM: a
// drain), and makes one call that updates an argument in place: axpy with
// alpha 2 on x = 1 and y = 0, y aliased to the result. Every element of y
// must come back 2 (never 4: a retry that sent the half-overwritten y), or
// the call fails with the status contract's error:
// - ABORTED, naming the arg, when the result had begun to land in y; or
// - another error, with y as the caller gave it (all 0).
// The phase was reached: the agent that ended wrote its name into the
// plan's exit_once file before it raised its signal. A call with side
// effects runs at most once: the agent that survives never ran it once the
// one that ended had begun its handler.
//
// Planes: unary and streamed gRPC, shared memory (the aliased arg in the
// caller's own shared buffer: written in place; or staged), UCX. Paths:
// straight to an agent, through the lookaside, through the router.
// Resident cells: y is a resident array on the agent (Client::Put before
// the fault is armed: exit_after_calls=1), updated there; the call succeeds
// and y (Client::Get) is all 2, or it fails UNAVAILABLE or NOT_FOUND
// ("resident lost") and never ran on another agent, nor twice.
// tests/python/test_fault_matrix.py covers the Python client and the JAX
// paths at the result phases.
#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "farcall/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/process_harness.h"

namespace farcall {
namespace {

using ::farcall::testing::ChildProcess;
using ::testing::HasSubstr;

enum class Plane { kUnary, kStream, kShm, kUcx };
enum class Path { kDirect, kLookaside, kRouter };

const char* PlaneName(Plane p) {
  constexpr const char* kNames[] = {"unary", "stream", "shm", "ucx"};
  return kNames[static_cast<int>(p)];
}
const char* PathName(Path p) {
  constexpr const char* kNames[] = {"direct", "lookaside", "router"};
  return kNames[static_cast<int>(p)];
}

struct Cell {
  Plane plane;
  Path path;
  std::string phase;
  bool term = false;             // SIGTERM (a drain) instead of SIGKILL
  bool keep = false;             // CallOptions::keep_aliased_args
  bool has_side_effect = false;  // then the call is `copy` of y, with an id
  bool resident = false;         // y is a resident array on the agent
};

std::string CellText(const Cell& c) {
  return absl::StrCat(PlaneName(c.plane), "_", PathName(c.path), "_", c.phase, "_",
                      c.term ? "term" : "kill", c.keep ? "_keep" : "",
                      c.has_side_effect ? "_effect" : "", c.resident ? "_resident" : "");
}
std::string CellName(const ::testing::TestParamInfo<Cell>& info) { return CellText(info.param); }
void PrintTo(const Cell& c, std::ostream* os) { *os << CellText(c); }

constexpr int64_t kElements = 1 << 20;  // 4 MiB of float32: 64 result frames of 64 KiB

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class FaultMatrixTest : public ::testing::TestWithParam<Cell> {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/farcall-fault-matrix-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    marker_ = dir_ + "/ended";
  }
  void TearDown() override {
    agents_.clear();
    router_.reset();
    unlink(marker_.c_str());
    rmdir(dir_.c_str());
  }

  std::unique_ptr<ChildProcess> StartAgent() {
    const Cell& c = GetParam();
    std::vector<std::string> args = {
        "--listen=127.0.0.1:0", "--response_chunk_bytes=65536", "--drain_seconds=30",
        absl::StrCat("--inject_faults=exit_at=", c.phase, ",exit_by=", c.term ? "term" : "kill",
                     ",exit_once=", marker_, c.resident ? ",exit_after_calls=1" : "")};
    auto p = ChildProcess::Start(FARCALL_AGENT_BIN, args);
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? *std::move(p) : nullptr;
  }

  // The call's target, with the agents (and router) it needs.
  std::string StartServers() {
    const Cell& c = GetParam();
    const int n = c.path == Path::kDirect ? 1 : 2;
    std::string list;
    for (int i = 0; i < n; ++i) {
      agents_.push_back(StartAgent());
      if (agents_.back() == nullptr) return "";
      absl::StrAppend(&list, i ? "," : "", agents_.back()->address());
    }
    if (c.path == Path::kDirect) return agents_[0]->address();
    auto r = ChildProcess::Start(FARCALL_ROUTER_BIN, {"--listen=127.0.0.1:0", "--agents=" + list,
                                                      "--probe_interval_ms=200"});
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return "";
    router_ = *std::move(r);
    return router_->address();
  }

  // Waits (bounded) until the router counts every agent live.
  bool RouterSeesAll(Client& client) {
    const absl::Time end = absl::Now() + absl::Seconds(20);
    while (absl::Now() < end) {
      auto listed = client.ListAgents(/*refresh=*/true);
      if (!listed.ok()) continue;
      int serving = 0;
      for (const AgentStatus& a : *listed) serving += a.health == AgentStatus::Health::kServing;
      if (serving == static_cast<int>(agents_.size())) return true;
    }
    return false;
  }

  // Waits (bounded) until the target answers a health check.
  static bool Answers(Client& client) {
    const absl::Time end = absl::Now() + absl::Seconds(20);
    while (absl::Now() < end) {
      if (client.Health(absl::Seconds(5)).ok()) return true;
    }
    return false;
  }

  // Calls the agents that still answer have ended, however they came.
  uint64_t SurvivorCalls(const std::string& skip_id) {
    uint64_t n = 0;
    for (const auto& a : agents_) {
      auto c = Client::Connect(a->address());
      if (!c.ok()) continue;
      auto d = (*c)->Describe(absl::Seconds(30));
      if (d.ok() && d->agent_id != skip_id) n += d->calls_total;
    }
    return n;
  }

  std::string dir_, marker_;
  std::vector<std::unique_ptr<ChildProcess>> agents_;
  std::unique_ptr<ChildProcess> router_;
};

TEST_P(FaultMatrixTest, ExactResultsOrTheStatedError) {
  const Cell& c = GetParam();
  const std::string target = StartServers();
  ASSERT_FALSE(target.empty());
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(target);
  ASSERT_TRUE(client.ok()) << client.status();
  if (router_ != nullptr) {
    ASSERT_TRUE(RouterSeesAll(**client));
  } else {
    // The process keeps one channel per address, and an earlier cell's agent
    // may have had this port: that channel can still be waiting out its
    // reconnect back-off (up to 1 s). The call starts once it is connected.
    ASSERT_TRUE(Answers(**client));
  }
  if (c.plane == Plane::kUcx) {
    auto a = Client::Connect(agents_[0]->address());
    ASSERT_TRUE(a.ok());
    // As above: the channel to this address may still be waiting out an
    // earlier cell's agent's back-off; asked once it answers.
    ASSERT_TRUE(Answers(**a));
    // Bounded generously: a loaded machine (ctest -j2 beside JAX) can be slow.
    auto d = (*a)->Describe(absl::Seconds(30));
    ASSERT_TRUE(d.ok()) << d.status();
    if (!d->offers_ucx) GTEST_SKIP() << "SKIPPED: the agent offers no UCX data plane here";
  }

  TensorSpec spec{DType::kF32, {kElements}};
  std::vector<float> x(kElements, 1.0f), y_memory;
  float* y = nullptr;
  SharedBuffer shared;
  const bool in_place = c.plane == Plane::kShm && c.path == Path::kDirect;
  if (in_place) {
    absl::StatusOr<SharedBuffer> b = (*client)->AllocateShared(kElements * sizeof(float));
    ASSERT_TRUE(b.ok()) << b.status();
    shared = *b;
    y = reinterpret_cast<float*>(shared.data());
    std::fill(y, y + kElements, 0.0f);
  } else {
    y_memory.assign(kElements, 0.0f);
    y = y_memory.data();
  }
  CallRequest req;
  req.platform = "cpu";
  req.has_side_effect = c.has_side_effect;
  std::optional<Resident> resident;
  if (c.resident) {
    CallOptions put;
    put.timeout = absl::Seconds(30);
    put.transport = Transport::kGrpc;
    put.via_router = c.path == Path::kRouter;
    absl::StatusOr<Resident> r = (*client)->Put(spec, y, "cpu", absl::ZeroDuration(), put);
    ASSERT_TRUE(r.ok()) << r.status();
    resident = *r;
  }
  if (c.resident) {
    req.handler = "axpy";
    req.args = {Arg::In(spec, x.data()), Arg::Of(*resident)};
    req.results = {spec};
    req.aliases = {{1, 0}};
    req.attributes["alpha"] = 2.0;
  } else if (c.has_side_effect) {
    req.handler = "copy";  // y's copy: side effects only in name, counted by the agents
    req.args = {Arg::In(spec, x.data())};
    req.results = {spec};
  } else {
    req.handler = "axpy";
    req.args = {Arg::In(spec, x.data()), Arg::InOut(spec, y)};
    req.results = {spec};
    req.aliases = {{1, 0}};
    req.attributes["alpha"] = 2.0;
  }
  CallOptions o;
  o.timeout = absl::Seconds(30);
  o.retries = 2;
  o.keep_aliased_args = c.keep;
  o.via_router = c.path == Path::kRouter;
  o.chunk_bytes = 256 << 10;
  switch (c.plane) {
    case Plane::kUnary:
      o.rpc = Rpc::kUnary;
      o.transport = Transport::kGrpc;
      break;
    case Plane::kStream:
      o.rpc = Rpc::kStream;
      o.transport = Transport::kGrpc;
      break;
    case Plane::kShm:
      o.transport = in_place ? Transport::kShm : Transport::kAuto;
      o.shm_min_bytes = 0;
      o.ucx_min_bytes = INT64_MAX;
      break;
    case Plane::kUcx:
      o.transport = Transport::kUcx;
      break;
  }
  absl::StatusOr<CallResult> r = (*client)->Call(req, o);
  std::cout << "outcome: " << (r.ok() ? std::string("OK") : r.status().ToString().substr(0, 160))
            << "\n";

  // The phase was reached: the agent that ended says which, before its end.
  const std::string ended = ReadFile(marker_);
  EXPECT_EQ(ended, c.phase) << "no agent reached " << c.phase << " (call: " << r.status() << ")";

  if (c.resident) {
    if (r.ok()) {
      ASSERT_TRUE(r->results[0].resident.has_value());
      CallOptions get;
      get.timeout = absl::Seconds(30);
      get.via_router = c.path == Path::kRouter;
      absl::StatusOr<ResultTensor> now = (*client)->Get(*resident, get);
      ASSERT_TRUE(now.ok()) << now.status();
      int64_t wrong = 0;
      for (int64_t i = 0; i < kElements; ++i) wrong += now->as<float>()[i] != 2.0f;
      EXPECT_EQ(wrong, 0) << "OK with " << wrong << " elements of the resident not 2";
      // A draining holder waits for its residents to go.
      EXPECT_TRUE((*client)->Delete({*resident}, get).ok());
      return;
    }
    // Its holder died: no other agent has it, and none ran the call.
    const absl::Status& s = r.status();
    EXPECT_FALSE(c.term) << "a drain lets the call finish: " << s;
    if (s.code() == absl::StatusCode::kNotFound) {
      EXPECT_THAT(std::string(s.message()), HasSubstr("was lost with its agent"));
    } else {
      EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
    }
    EXPECT_EQ(SurvivorCalls(resident->agent_id()), 0u) << s;
    return;
  }
  if (c.has_side_effect) {
    // At most once: once the agent that ended had begun the handler, no
    // other agent ran it (the survivors' only calls are this one's).
    const bool began = c.phase != "header" && c.phase != "upload";
    if (began && !c.term) {
      EXPECT_EQ(SurvivorCalls(""), 0u) << r.status();
    }
    if (r.ok()) {
      EXPECT_EQ(r->results[0].as<float>()[kElements - 1], 1.0f);
    }
    return;
  }
  if (r.ok()) {
    int64_t wrong = 0;
    for (int64_t i = 0; i < kElements; ++i) wrong += y[i] != 2.0f;
    EXPECT_EQ(wrong, 0) << "OK with " << wrong << " elements of y not 2 (y[0] = " << y[0] << ")";
    return;
  }
  const absl::Status& s = r.status();
  if (s.code() == absl::StatusCode::kAborted) {
    // Only where the result landed in y, and never with a copy to restore.
    EXPECT_FALSE(c.keep) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("land in args[1], which it aliases: "));
    EXPECT_THAT(std::string(s.message()), HasSubstr("The call was not sent again"));
    // Counted chunks land only once sent; a result written in place (the
    // caller's shared buffer) counts as landed whenever the handler may
    // have run, which a call that broke before its answer cannot rule out.
    if (!in_place) {
      EXPECT_NE(c.phase, "header") << s;
    }
    return;
  }
  // Any other error leaves y as the caller gave it.
  int64_t touched = 0;
  for (int64_t i = 0; i < kElements; ++i) touched += y[i] != 0.0f;
  EXPECT_EQ(touched, 0) << s;
  // A drain lets the call finish; a lookaside or router call finds the
  // agent that survives.
  if (c.term || c.path != Path::kDirect) ADD_FAILURE() << "expected an answer: " << s;
}

std::vector<Cell> Cells() {
  const std::vector<std::string> all = {"header",       "upload",     "handler",
                                        "result_first", "result_mid", "result_last"};
  std::vector<Cell> cells;
  for (Plane plane : {Plane::kUnary, Plane::kStream, Plane::kShm, Plane::kUcx}) {
    for (Path path : {Path::kDirect, Path::kLookaside, Path::kRouter}) {
      // Shared memory and UCX reach only agents called directly.
      if ((plane == Plane::kShm || plane == Plane::kUcx) && path == Path::kRouter) continue;
      for (const std::string& phase : all) {
        // A shared-memory call uploads nothing.
        if (plane == Plane::kShm && phase == "upload") continue;
        cells.push_back({plane, path, phase});
        if (path == Path::kLookaside) cells.push_back({plane, path, phase, /*term=*/true});
      }
    }
  }
  // With a copy of y to restore, a call whose result landed goes again.
  for (Path path : {Path::kLookaside, Path::kRouter}) {
    for (const char* phase : {"result_first", "result_mid"}) {
      cells.push_back({Plane::kStream, path, phase, false, /*keep=*/true});
    }
  }
  cells.push_back({Plane::kUcx, Path::kLookaside, "result_mid", false, true});
  // Side effects: at most once.
  for (Path path : {Path::kLookaside, Path::kRouter}) {
    for (const char* phase : {"header", "handler", "result_mid"}) {
      cells.push_back({Plane::kStream, path, phase, false, false, /*has_side_effect=*/true});
    }
  }
  // Resident arrays: the holder dies or drains before the upload, at it,
  // and as the handler is about to run.
  for (Plane plane : {Plane::kUnary, Plane::kStream}) {
    for (Path path : {Path::kDirect, Path::kLookaside, Path::kRouter}) {
      for (const char* phase : {"header", "upload", "handler"}) {
        for (bool term : {false, true}) {
          if (term && path != Path::kRouter) continue;
          cells.push_back({plane, path, phase, term, false, false, /*resident=*/true});
        }
      }
    }
  }
  return cells;
}

INSTANTIATE_TEST_SUITE_P(Cells, FaultMatrixTest, ::testing::ValuesIn(Cells()), CellName);

}  // namespace
}  // namespace farcall
