#include "core/memory_limit.h"

#include <unistd.h>

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

}  // namespace
}  // namespace farcall
