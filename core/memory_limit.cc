#include "core/memory_limit.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>

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

// Applies the limits in `dir` and its ancestors up to `top` to `limit`.
void ApplyLimits(const std::string& top, std::string dir, const std::string& file, int64_t* limit) {
  for (;;) {
    const int64_t v = ReadLimit(top + dir + "/" + file);
    if (v > 0) *limit = std::min(*limit, v);
    if (dir.empty() || dir == "/") return;
    const size_t slash = dir.rfind('/');
    dir = slash == std::string::npos ? "" : dir.substr(0, slash);
  }
}

}  // namespace

int64_t MemoryLimitBytes(const std::string& root) {
  const std::string r = root.empty() || root.back() != '/' ? root : root.substr(0, root.size() - 1);
  int64_t limit = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
  std::ifstream cgroups(r + "/proc/self/cgroup");
  std::string line;
  while (std::getline(cgroups, line)) {
    // "0::/path" (v2), or "N:memory[,...]:/path" (v1).
    std::vector<std::string> parts = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (parts.size() != 3) continue;
    if (parts[0] == "0" && parts[1].empty()) {
      ApplyLimits(r + "/sys/fs/cgroup", parts[2], "memory.max", &limit);
    } else {
      for (absl::string_view c : absl::StrSplit(parts[1], ',')) {
        if (c == "memory") {
          ApplyLimits(r + "/sys/fs/cgroup/memory", parts[2], "memory.limit_in_bytes", &limit);
        }
      }
    }
  }
  return limit;
}

}  // namespace farcall
