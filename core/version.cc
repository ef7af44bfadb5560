#include "core/version.h"

namespace farcall {

const char* Version() { return FARCALL_VERSION; }

}  // namespace farcall
