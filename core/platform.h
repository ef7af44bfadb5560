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

// Whether `name` is "gpu" (in any case): JAX's name for whichever GPU
// platform a job has, which it turns into cuda or rocm. farcall does the
// same: a router sends such a call to cuda agents when any are live, else to
// rocm ones, and a cuda or rocm agent takes it as its own.
bool IsGpuAlias(absl::string_view name);

}  // namespace farcall

#endif  // FARCALL_CORE_PLATFORM_H_
