#include "core/cgroup_limits.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace farcall {
namespace {

namespace fs = std::filesystem;

void Write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

int64_t Physical() { return static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE); }

fs::path FreshRoot(const std::string& name) {
  fs::path root = fs::path(::testing::TempDir()) / name;
  fs::remove_all(root);
  return root;
}

TEST(MemoryLimitTest, NoCgroupLimitIsPhysicalMemory) {
  fs::path root = FreshRoot("none");
  Write(root / "proc/self/cgroup", "0::/\n");
  Write(root / "sys/fs/cgroup/memory.max", "max\n");
  EXPECT_EQ(MemoryLimitBytes(root.string()), Physical());
  EXPECT_EQ(MemoryLimitBytes((FreshRoot("empty")).string()), Physical());
}

TEST(MemoryLimitTest, CgroupV2LimitOfTheGroupOrAnAncestor) {
  fs::path root = FreshRoot("v2");
  Write(root / "proc/self/cgroup", "0::/kubepods/pod1/agent\n");
  Write(root / "sys/fs/cgroup/kubepods/pod1/agent/memory.max", "max\n");
  Write(root / "sys/fs/cgroup/kubepods/pod1/memory.max", "1073741824\n");
  Write(root / "sys/fs/cgroup/kubepods/memory.max", "4294967296\n");
  EXPECT_EQ(MemoryLimitBytes(root.string()), std::min<int64_t>(Physical(), 1 << 30));
}

TEST(MemoryLimitTest, CgroupV1Limit) {
  fs::path root = FreshRoot("v1");
  Write(root / "proc/self/cgroup", "5:cpu,cpuacct:/x\n4:memory:/docker/abc\n");
  Write(root / "sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes", "536870912\n");
  EXPECT_EQ(MemoryLimitBytes(root.string()), std::min<int64_t>(Physical(), 512 << 20));
}

int Online() { return static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)); }

TEST(CpuLimitTest, NoQuotaIsEveryCore) {
  fs::path root = FreshRoot("cpu-none");
  Write(root / "proc/self/cgroup", "0::/\n");
  Write(root / "sys/fs/cgroup/cpu.max", "max 100000\n");
  EXPECT_EQ(CpuLimit(root.string()), Online());
  EXPECT_GE(CpuLimit(), 1);  // this process's own
}

TEST(CpuLimitTest, CgroupV2QuotaOfTheGroupOrAnAncestorRoundedUp) {
  fs::path root = FreshRoot("cpu-v2");
  Write(root / "proc/self/cgroup", "0::/kubepods/pod1/agent\n");
  Write(root / "sys/fs/cgroup/kubepods/pod1/agent/cpu.max", "max 100000\n");
  Write(root / "sys/fs/cgroup/kubepods/pod1/cpu.max", "150000 100000\n");  // 1.5 CPUs
  EXPECT_EQ(CpuLimit(root.string()), std::min(Online(), 2));
}

TEST(CpuLimitTest, CgroupV1Quota) {
  fs::path root = FreshRoot("cpu-v1");
  Write(root / "proc/self/cgroup", "5:cpu,cpuacct:/docker/abc\n4:memory:/docker/abc\n");
  Write(root / "sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "100000\n");
  Write(root / "sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000\n");
  EXPECT_EQ(CpuLimit(root.string()), 1);
  Write(root / "sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "-1\n");
  EXPECT_EQ(CpuLimit(root.string()), Online());
}

}  // namespace
}  // namespace farcall
