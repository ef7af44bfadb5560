#include "device_agents/device.h"

#include <set>

#include "absl/strings/str_cat.h"

namespace farcall::agent {

absl::StatusOr<std::vector<int>> SelectDevices(absl::string_view platform, int count,
                                               const std::vector<int>& wanted) {
  std::vector<int> out;
  if (wanted.empty()) {
    for (int i = 0; i < count; ++i) out.push_back(i);
    return out;
  }
  std::set<int> seen;
  for (int d : wanted) {
    if (d < 0 || d >= count) {
      return absl::InvalidArgumentError(absl::StrCat("--devices names ", platform, " device ", d,
                                                     ", but this host has ", count,
                                                     " (ordinals 0 to ", count - 1, ")."));
    }
    if (!seen.insert(d).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("--devices names ", platform, " device ", d, " twice."));
    }
    out.push_back(d);
  }
  return out;
}

}  // namespace farcall::agent
