#include "core/cgroup_limits.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace farcall {
namespace {

// The number in a limit file; 0 for "max", a missing file or no number.
int64_t ReadLimit(const std::string& path) {
  std::ifstream f(path);
  std::string text;
  if (!f || !std::getline(f, text)) return 0;
  int64_t v = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &v) || v <= 0) return 0;
  return v;
}

// Calls `f` with `dir` and then each of its ancestors, up to the root.
void ForSelfAndAncestors(std::string dir, const std::function<void(const std::string&)>& f) {
  for (;;) {
    f(dir);
    if (dir.empty() || dir == "/") return;
    const size_t slash = dir.rfind('/');
    dir = slash == std::string::npos ? "" : dir.substr(0, slash);
  }
}

// Applies the limits in `dir` and its ancestors up to `top` to `limit`.
void ApplyLimits(const std::string& top, const std::string& dir, const std::string& file,
                 int64_t* limit) {
  ForSelfAndAncestors(dir, [&](const std::string& d) {
    const int64_t v = ReadLimit(top + d + "/" + file);
    if (v > 0) *limit = std::min(*limit, v);
  });
}

// The cores a CPU quota in `dir` grants (rounded up); 0 for none.
using QuotaReader = int64_t (*)(const std::string& dir);

int64_t CpuMaxCores(const std::string& dir) {
  // cgroup v2: "QUOTA PERIOD", or "max PERIOD".
  std::ifstream f(dir + "/cpu.max");
  std::string quota, period;
  int64_t q = 0, p = 0;
  if (!(f >> quota >> period) || !absl::SimpleAtoi(quota, &q) || !absl::SimpleAtoi(period, &p) ||
      q <= 0 || p <= 0) {
    return 0;
  }
  return (q + p - 1) / p;
}

int64_t CfsQuotaCores(const std::string& dir) {
  // cgroup v1: cpu.cfs_quota_us (-1: none) over cpu.cfs_period_us.
  const int64_t q = ReadLimit(dir + "/cpu.cfs_quota_us");
  const int64_t p = ReadLimit(dir + "/cpu.cfs_period_us");
  return q > 0 && p > 0 ? (q + p - 1) / p : 0;
}

// Applies the quotas of `dir` and its ancestors under `top` to `cores`.
void ApplyQuotas(const std::string& top, const std::string& dir, QuotaReader read, int64_t* cores) {
  ForSelfAndAncestors(dir, [&](const std::string& d) {
    const int64_t v = read(top + d);
    if (v > 0) *cores = std::min(*cores, v);
  });
}

// `root` without a trailing slash.
std::string Trimmed(const std::string& root) {
  return root.empty() || root.back() != '/' ? root : root.substr(0, root.size() - 1);
}

// Each line of /proc/self/cgroup as (hierarchy id, controllers, path).
std::vector<std::vector<std::string>> CgroupsOfThisProcess(const std::string& r) {
  std::vector<std::vector<std::string>> out;
  std::ifstream cgroups(r + "/proc/self/cgroup");
  std::string line;
  while (std::getline(cgroups, line)) {
    // "0::/path" (v2), or "N:memory[,...]:/path" (v1).
    std::vector<std::string> parts = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (parts.size() == 3) out.push_back(std::move(parts));
  }
  return out;
}

bool HasController(const std::string& controllers, absl::string_view name) {
  for (absl::string_view c : absl::StrSplit(controllers, ',')) {
    if (c == name) return true;
  }
  return false;
}

}  // namespace

int CpuLimit(const std::string& root) {
  const std::string r = Trimmed(root);
  int64_t cores = 0;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (r.empty() && sched_getaffinity(0, sizeof(set), &set) == 0) cores = CPU_COUNT(&set);
  if (cores <= 0) cores = std::max<int64_t>(1, sysconf(_SC_NPROCESSORS_ONLN));
  for (const std::vector<std::string>& parts : CgroupsOfThisProcess(r)) {
    if (parts[0] == "0" && parts[1].empty()) {
      ApplyQuotas(r + "/sys/fs/cgroup", parts[2], CpuMaxCores, &cores);
    } else if (HasController(parts[1], "cpu")) {
      ApplyQuotas(r + "/sys/fs/cgroup/cpu", parts[2], CfsQuotaCores, &cores);
      ApplyQuotas(r + "/sys/fs/cgroup/cpu,cpuacct", parts[2], CfsQuotaCores, &cores);
    }
  }
  return static_cast<int>(std::max<int64_t>(cores, 1));
}

int64_t MemoryLimitBytes(const std::string& root) {
  const std::string r = Trimmed(root);
  int64_t limit = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
  for (const std::vector<std::string>& parts : CgroupsOfThisProcess(r)) {
    if (parts[0] == "0" && parts[1].empty()) {
      ApplyLimits(r + "/sys/fs/cgroup", parts[2], "memory.max", &limit);
    } else if (HasController(parts[1], "memory")) {
      ApplyLimits(r + "/sys/fs/cgroup/memory", parts[2], "memory.limit_in_bytes", &limit);
    }
  }
  return limit;
}

}  // namespace farcall
