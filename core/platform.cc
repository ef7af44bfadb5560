#include "core/platform.h"
#include "absl/strings/string_view.h"

#include "absl/strings/match.h"

namespace farcall {
namespace {
constexpr Platform kAll[] = {Platform::kCpu, Platform::kCuda, Platform::kRocm, Platform::kOneApi};
}  // namespace

absl::string_view PlatformName(Platform p) {
  switch (p) {
    case Platform::kCpu:
      return "cpu";
    case Platform::kCuda:
      return "cuda";
    case Platform::kRocm:
      return "rocm";
    case Platform::kOneApi:
      return "oneapi";
  }
  return "unknown";
}

std::optional<Platform> ParsePlatform(absl::string_view name) {
  for (Platform p : kAll) {
    if (absl::EqualsIgnoreCase(name, PlatformName(p))) return p;
  }
  return std::nullopt;
}

bool IsGpuAlias(absl::string_view name) { return absl::EqualsIgnoreCase(name, "gpu"); }

}  // namespace farcall
