// farcall's version, as the build names it (CMake's project version): what
// Describe reports, the start-up log line shows and farcall_build_info
// carries.
#ifndef FARCALL_CORE_VERSION_H_
#define FARCALL_CORE_VERSION_H_

namespace farcall {

const char* Version();

}  // namespace farcall

#endif  // FARCALL_CORE_VERSION_H_
