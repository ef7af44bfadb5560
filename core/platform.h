// The platform table: the backends buffer_callback supports, as JAX names
// them. Names compare case-insensitively; messages keep the caller's spelling.
#ifndef FARCALL_CORE_PLATFORM_H_
#define FARCALL_CORE_PLATFORM_H_

#include <optional>
#include "absl/strings/string_view.h"

namespace farcall {

enum class Platform { kCpu, kCuda, kRocm, kOneApi };

// "cpu", "cuda", "rocm", "oneapi".
absl::string_view PlatformName(Platform p);

// The platform named `name` in any case ("CUDA" -> kCuda), or nullopt.
std::optional<Platform> ParsePlatform(absl::string_view name);

}  // namespace farcall

#endif  // FARCALL_CORE_PLATFORM_H_
