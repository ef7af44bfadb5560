#include "device_agents/fault_injection.h"

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace farcall::agent {
namespace {

using ::testing::HasSubstr;

class HostMemory final : public DeviceMemory {
 public:
  explicit HostMemory(int64_t size) : bytes_(size) {}
  void* device_ptr() override { return bytes_.data(); }
  uint8_t* host_ptr() override { return bytes_.data(); }
  int64_t size() const override { return static_cast<int64_t>(bytes_.size()); }

 private:
  std::vector<uint8_t> bytes_;
};

// A stream whose launches count and always succeed.
class CountingStream final : public Stream {
 public:
  explicit CountingStream(std::atomic<int>* launches) : launches_(launches) {}
  FarcallStreamKind kind() const override { return FARCALL_STREAM_NONE; }
  void* native() override { return nullptr; }
  absl::Status CopyToDevice(const void*, DeviceMemory&, int64_t, int64_t) override {
    return absl::OkStatus();
  }
  absl::Status CopyToHost(DeviceMemory&, int64_t, int64_t, void*) override {
    return absl::OkStatus();
  }
  absl::Status Invoke(const RegisteredHandler&, HandlerInvocation&) override {
    ++*launches_;
    return absl::OkStatus();
  }
  absl::Status Synchronize() override { return absl::OkStatus(); }

 private:
  std::atomic<int>* launches_;
};

class HealthyDevice final : public Device {
 public:
  explicit HealthyDevice(int ordinal) : ordinal_(ordinal) {}
  Platform platform() const override { return Platform::kCpu; }
  int ordinal() const override { return ordinal_; }
  std::string name() const override { return "healthy"; }
  int64_t memory_bytes() const override { return 1 << 30; }
  int64_t memory_used_bytes() const override { return 0; }
  absl::StatusOr<std::unique_ptr<DeviceMemory>> Allocate(int64_t size) override {
    return std::make_unique<HostMemory>(size);
  }
  absl::StatusOr<std::unique_ptr<Stream>> AcquireStream() override {
    return std::make_unique<CountingStream>(&launches);
  }
  std::atomic<int> launches{0};

 private:
  const int ordinal_;
};

Backend TwoDevices(const std::string& spec) {
  Backend b;
  b.devices.push_back(std::make_unique<HealthyDevice>(0));
  b.devices.push_back(std::make_unique<HealthyDevice>(1));
  absl::StatusOr<FaultPlan> plan = ParseFaultPlan(spec);
  EXPECT_TRUE(plan.ok()) << plan.status();
  InjectFaults(*plan, b);
  return b;
}

absl::Status Launch(Device& d) {
  absl::StatusOr<std::unique_ptr<Stream>> s = d.AcquireStream();
  if (!s.ok()) return s.status();
  RegisteredHandler h;
  HandlerInvocation inv;
  return (*s)->Invoke(h, inv);
}

TEST(FaultPlanTest, ParsesTheFaultsAndNamesABadEntry) {
  absl::StatusOr<FaultPlan> p = ParseFaultPlan("allocate=3,run=10,lose_device=7");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->allocate_every, 3);
  EXPECT_EQ(p->run_every, 10);
  EXPECT_EQ(p->lose_device_at, 7);
  EXPECT_EQ(p->ToString(), "allocate=3,run=10,lose_device=7");
  EXPECT_TRUE(ParseFaultPlan("")->empty());

  absl::Status bad = ParseFaultPlan("allocate=3,melt=1").status();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.message(),
            "--inject_faults: unknown fault 'melt'; the faults are allocate, run, lose_device, "
            "exit_at, exit_by, exit_once and exit_after_calls.");
  EXPECT_EQ(ParseFaultPlan("run=-1").status().message(),
            "--inject_faults: 'run=-1' needs a count of 0 or more, as in allocate=3.");
  EXPECT_FALSE(ParseFaultPlan("run").ok());
}

TEST(FaultInjectionTest, ParsesAPhaseToExitAt) {
  absl::StatusOr<FaultPlan> p =
      ParseFaultPlan("exit_at=result_mid,exit_by=term,exit_once=/x/y,exit_after_calls=2");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->exit_at, CallPhase::kResultMid);
  EXPECT_TRUE(p->exit_by_term);
  EXPECT_EQ(p->exit_once, "/x/y");
  EXPECT_EQ(p->exit_after_calls, 2);
  EXPECT_FALSE(p->empty());
  EXPECT_EQ(p->ToString(), "exit_at=result_mid,exit_by=term,exit_once=/x/y,exit_after_calls=2");
  EXPECT_FALSE(ParseFaultPlan("exit_at=header")->exit_by_term);
  EXPECT_EQ(ParseFaultPlan("exit_at=later").status().message(),
            "--inject_faults: 'exit_at=later' names no phase; the phases are header, upload, "
            "handler, result_first, result_mid and result_last.");
  EXPECT_EQ(ParseFaultPlan("exit_by=stop").status().message(),
            "--inject_faults: 'exit_by=stop' must be exit_by=kill or exit_by=term.");
  EXPECT_FALSE(ParseFaultPlan("exit_once=").ok());
}

TEST(FaultInjectionTest, AnEmptyPlanLeavesTheDevicesAsTheyAre) {
  Backend b = TwoDevices("");
  EXPECT_NE(dynamic_cast<HealthyDevice*>(b.devices[0].get()), nullptr);
}

TEST(FaultInjectionTest, EveryNthAllocationIsOutOfMemoryCountedOverAllDevices) {
  Backend b = TwoDevices("allocate=2");
  EXPECT_TRUE(b.devices[0]->Allocate(64).ok());
  absl::Status s = b.devices[1]->Allocate(64).status();  // the 2nd overall
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(),
            "out of device memory: 64 bytes could not be allocated on device 1 (injected by "
            "--inject_faults=allocate=2).");
  EXPECT_TRUE(b.devices[0]->Allocate(64).ok());
  EXPECT_FALSE(b.devices[0]->Allocate(64).ok());
  EXPECT_TRUE(b.devices[0]->health().ok());  // memory comes back; nothing is lost
}

TEST(FaultInjectionTest, EveryNthLaunchFailsAndTheDeviceServesOn) {
  Backend b = TwoDevices("run=3");
  EXPECT_TRUE(Launch(*b.devices[0]).ok());
  EXPECT_TRUE(Launch(*b.devices[0]).ok());
  absl::Status s = Launch(*b.devices[0]);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(s.message(), HasSubstr("injected by --inject_faults=run=3"));
  EXPECT_TRUE(Launch(*b.devices[0]).ok());
  EXPECT_TRUE(b.devices[0]->health().ok());
}

TEST(FaultInjectionTest, ALostDeviceFailsEveryLaterLaunchAndReportsItInHealth) {
  Backend b = TwoDevices("lose_device=2");
  EXPECT_TRUE(Launch(*b.devices[0]).ok());
  EXPECT_TRUE(b.devices[0]->health().ok());
  absl::Status lost = Launch(*b.devices[0]);
  EXPECT_EQ(lost.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(lost.message(), "device 0 was lost (injected by --inject_faults=lose_device=2).");
  EXPECT_EQ(Launch(*b.devices[0]), lost);
  EXPECT_EQ(b.devices[0]->health(), lost);
  EXPECT_TRUE(b.devices[1]->health().ok());  // only the device that was lost
  EXPECT_TRUE(Launch(*b.devices[1]).ok());
}

TEST(FaultInjectionTest, CountsHoldWhenCallsRunAtOnce) {
  Backend b = TwoDevices("run=10");
  std::atomic<int> failed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 100; ++i) {
        if (!Launch(*b.devices[t % 2]).ok()) ++failed;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failed.load(), 80);  // every 10th of 800 launches
}

}  // namespace
}  // namespace farcall::agent
