#include "device_agents/fault_injection.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"

namespace farcall::agent {
namespace {

// The counts, shared by the faulty devices of one agent.
struct FaultCounters {
  explicit FaultCounters(FaultPlan plan) : plan(plan) {}
  const FaultPlan plan;
  std::atomic<int64_t> allocations{0};
  std::atomic<int64_t> runs{0};
  absl::Mutex mu;
  std::map<int, absl::Status> lost ABSL_GUARDED_BY(mu);  // by ordinal: sticky errors

  static bool Hits(std::atomic<int64_t>& count, int64_t every) {
    const int64_t n = count.fetch_add(1) + 1;
    return every > 0 && n % every == 0;
  }
  // OK, or the sticky error of device `ordinal` once it was lost.
  absl::Status Lost(int ordinal) {
    absl::MutexLock l(&mu);
    auto it = lost.find(ordinal);
    return it == lost.end() ? absl::OkStatus() : it->second;
  }
  // Counts a handler launch on device `ordinal`: the error it fails with,
  // or OK.
  absl::Status Launch(int ordinal) {
    if (absl::Status s = Lost(ordinal); !s.ok()) return s;
    const int64_t n = runs.fetch_add(1) + 1;
    if (plan.lose_device_at > 0 && n == plan.lose_device_at) {
      absl::Status s = absl::InternalError(absl::StrCat(
          "device ", ordinal,
          " was lost (injected by --inject_faults=lose_device=", plan.lose_device_at, ")."));
      absl::MutexLock l(&mu);
      lost[ordinal] = s;
      return s;
    }
    if (plan.run_every > 0 && n % plan.run_every == 0) {
      return absl::InternalError(absl::StrCat("the handler's launch failed on device ", ordinal,
                                              " (injected by --inject_faults=run=", plan.run_every,
                                              ")."));
    }
    return absl::OkStatus();
  }
};

class FaultyStream final : public Stream {
 public:
  FaultyStream(std::unique_ptr<Stream> inner, std::shared_ptr<FaultCounters> counters, int ordinal)
      : inner_(std::move(inner)), counters_(std::move(counters)), ordinal_(ordinal) {}
  FarcallStreamKind kind() const override { return inner_->kind(); }
  void* native() override { return inner_->native(); }
  absl::Status CopyToDevice(const void* host, DeviceMemory& dst, int64_t offset,
                            int64_t size) override {
    return inner_->CopyToDevice(host, dst, offset, size);
  }
  absl::Status CopyToHost(DeviceMemory& src, int64_t offset, int64_t size, void* host) override {
    return inner_->CopyToHost(src, offset, size, host);
  }
  absl::Status Invoke(const RegisteredHandler& handler, HandlerInvocation& inv) override {
    if (absl::Status s = counters_->Launch(ordinal_); !s.ok()) return s;
    return inner_->Invoke(handler, inv);
  }
  absl::Status Synchronize() override { return inner_->Synchronize(); }

 private:
  std::unique_ptr<Stream> inner_;
  std::shared_ptr<FaultCounters> counters_;
  const int ordinal_;
};

class FaultyDevice final : public Device {
 public:
  FaultyDevice(std::unique_ptr<Device> inner, std::shared_ptr<FaultCounters> counters)
      : inner_(std::move(inner)), counters_(std::move(counters)) {}
  Platform platform() const override { return inner_->platform(); }
  int ordinal() const override { return inner_->ordinal(); }
  std::string name() const override { return inner_->name(); }
  int64_t memory_bytes() const override { return inner_->memory_bytes(); }
  int64_t memory_used_bytes() const override { return inner_->memory_used_bytes(); }
  absl::StatusOr<std::unique_ptr<DeviceMemory>> Allocate(int64_t size) override {
    if (FaultCounters::Hits(counters_->allocations, counters_->plan.allocate_every)) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "out of device memory: ", size, " bytes could not be allocated on device ", ordinal(),
          " (injected by --inject_faults=allocate=", counters_->plan.allocate_every, ")."));
    }
    return inner_->Allocate(size);
  }
  absl::StatusOr<std::unique_ptr<Stream>> AcquireStream() override {
    absl::StatusOr<std::unique_ptr<Stream>> s = inner_->AcquireStream();
    if (!s.ok()) return s;
    return std::unique_ptr<Stream>(
        std::make_unique<FaultyStream>(*std::move(s), counters_, ordinal()));
  }
  std::unique_ptr<StagingBlock> TryAcquireStaging() override { return inner_->TryAcquireStaging(); }
  absl::Status health() const override {
    if (absl::Status s = counters_->Lost(ordinal()); !s.ok()) return s;
    return inner_->health();
  }

 private:
  std::unique_ptr<Device> inner_;
  std::shared_ptr<FaultCounters> counters_;
};

constexpr std::pair<const char*, CallPhase> kPhases[] = {
    {"header", CallPhase::kHeader},        {"upload", CallPhase::kUpload},
    {"handler", CallPhase::kHandler},      {"result_first", CallPhase::kResultFirst},
    {"result_mid", CallPhase::kResultMid}, {"result_last", CallPhase::kResultLast},
};

const char* PhaseName(CallPhase phase) {
  for (const auto& [name, p] : kPhases) {
    if (p == phase) return name;
  }
  return "none";
}

// exit_at, armed once at start (InjectFaults) and read by every call.
std::atomic<CallPhase> exit_phase{CallPhase::kNone};
std::atomic<bool> exit_fired{false};
FaultPlan* exit_plan = nullptr;                           // set before exit_phase, never freed
const std::atomic<uint64_t>* exit_calls_ended = nullptr;  // the agent's count (exit_after_calls)

}  // namespace

bool PhaseExitArmed() {
  return exit_phase.load(std::memory_order_relaxed) != CallPhase::kNone &&
         !exit_fired.load(std::memory_order_relaxed);
}

void ReachedPhase(CallPhase phase) {
  if (exit_phase.load(std::memory_order_acquire) != phase || phase == CallPhase::kNone) return;
  const FaultPlan& plan = *exit_plan;
  if (plan.exit_after_calls > 0 &&
      (exit_calls_ended == nullptr || static_cast<int64_t>(exit_calls_ended->load(
                                          std::memory_order_acquire)) < plan.exit_after_calls)) {
    return;
  }
  if (exit_fired.exchange(true)) return;
  if (!plan.exit_once.empty()) {
    const int fd = open(plan.exit_once.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) return;  // another agent of the plan exited there already
    const char* name = PhaseName(phase);
    (void)!write(fd, name, strlen(name));
    close(fd);
  }
  raise(plan.exit_by_term ? SIGTERM : SIGKILL);
}

std::string FaultPlan::ToString() const {
  std::vector<std::string> parts;
  if (allocate_every > 0) parts.push_back(absl::StrCat("allocate=", allocate_every));
  if (run_every > 0) parts.push_back(absl::StrCat("run=", run_every));
  if (lose_device_at > 0) parts.push_back(absl::StrCat("lose_device=", lose_device_at));
  if (exit_at != CallPhase::kNone) {
    parts.push_back(absl::StrCat("exit_at=", PhaseName(exit_at)));
    parts.push_back(exit_by_term ? "exit_by=term" : "exit_by=kill");
  }
  if (!exit_once.empty()) parts.push_back(absl::StrCat("exit_once=", exit_once));
  if (exit_after_calls > 0) parts.push_back(absl::StrCat("exit_after_calls=", exit_after_calls));
  return absl::StrJoin(parts, ",");
}

absl::StatusOr<FaultPlan> ParseFaultPlan(absl::string_view spec) {
  FaultPlan plan;
  for (absl::string_view entry : absl::StrSplit(spec, ',', absl::SkipEmpty())) {
    std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(entry, '=');
    if (kv.first == "exit_at") {
      plan.exit_at = CallPhase::kNone;
      for (const auto& [name, p] : kPhases) {
        if (kv.second == name) plan.exit_at = p;
      }
      if (plan.exit_at == CallPhase::kNone) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--inject_faults: '", entry,
            "' names no phase; the phases are header, upload, handler, result_first, result_mid "
            "and result_last."));
      }
      continue;
    }
    if (kv.first == "exit_by") {
      if (kv.second != "kill" && kv.second != "term") {
        return absl::InvalidArgumentError(
            absl::StrCat("--inject_faults: '", entry, "' must be exit_by=kill or exit_by=term."));
      }
      plan.exit_by_term = kv.second == "term";
      continue;
    }
    if (kv.first == "exit_once") {
      if (kv.second.empty()) {
        return absl::InvalidArgumentError("--inject_faults: exit_once needs a file path.");
      }
      plan.exit_once = std::string(kv.second);
      continue;
    }
    int64_t n = 0;
    if (!absl::SimpleAtoi(kv.second, &n) || n < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--inject_faults: '", entry, "' needs a count of 0 or more, as in allocate=3."));
    }
    if (kv.first == "allocate") {
      plan.allocate_every = n;
    } else if (kv.first == "run") {
      plan.run_every = n;
    } else if (kv.first == "lose_device") {
      plan.lose_device_at = n;
    } else if (kv.first == "exit_after_calls") {
      plan.exit_after_calls = n;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("--inject_faults: unknown fault '", kv.first,
                       "'; the faults are allocate, run, lose_device, exit_at, exit_by, "
                       "exit_once and exit_after_calls."));
    }
  }
  return plan;
}

void InjectFaults(const FaultPlan& plan, Backend& backend,
                  const std::atomic<uint64_t>* calls_ended) {
  if (plan.empty()) return;
  if (plan.exit_at != CallPhase::kNone) {
    exit_calls_ended = calls_ended;
    exit_plan = new FaultPlan(plan);
    exit_phase.store(plan.exit_at, std::memory_order_release);
  }
  auto counters = std::make_shared<FaultCounters>(plan);
  for (std::unique_ptr<Device>& d : backend.devices) {
    d = std::make_unique<FaultyDevice>(std::move(d), counters);
  }
}

}  // namespace farcall::agent
