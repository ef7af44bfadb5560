// How much memory this process may use: the host's physical memory, or less
// when a cgroup (a container's limit) says so.
#ifndef FARCALL_CORE_MEMORY_LIMIT_H_
#define FARCALL_CORE_MEMORY_LIMIT_H_

#include <cstdint>
#include <string>

namespace farcall {

// min(physical memory, every memory limit of this process's cgroup and its
// ancestors): cgroup v2 `memory.max`, or cgroup v1
// `memory.limit_in_bytes`. `root` prefixes every path read ("/" normally;
// a fake tree in tests).
int64_t MemoryLimitBytes(const std::string& root = "/");

}  // namespace farcall

#endif  // FARCALL_CORE_MEMORY_LIMIT_H_
