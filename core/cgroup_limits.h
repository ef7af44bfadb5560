// How much memory and CPU this process may use: the host's, or less when a
// cgroup (a container's limits) says so.
#ifndef FARCALL_CORE_CGROUP_LIMITS_H_
#define FARCALL_CORE_CGROUP_LIMITS_H_

#include <cstdint>
#include <string>

namespace farcall {

// min(physical memory, every memory limit of this process's cgroup and its
// ancestors): cgroup v2 `memory.max`, or cgroup v1
// `memory.limit_in_bytes`. `root` prefixes every path read ("/" normally;
// a fake tree in tests).
int64_t MemoryLimitBytes(const std::string& root = "/");

// The cores this process may keep busy, at least 1: min(the cores it may
// run on, every CPU quota of its cgroup and its ancestors, rounded up):
// cgroup v2 `cpu.max` ("QUOTA PERIOD", or "max"), or cgroup v1
// `cpu.cfs_quota_us` over `cpu.cfs_period_us`. A pod with a 4-CPU limit on
// a 64-core node gets 4.
int CpuLimit(const std::string& root = "/");

}  // namespace farcall

#endif  // FARCALL_CORE_CGROUP_LIMITS_H_
