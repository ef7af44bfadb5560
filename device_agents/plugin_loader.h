// Loads handler plugins (shared objects built against farcall/handler.h).
// A plugin stays loaded for the life of the process.
#ifndef FARCALL_DEVICE_AGENTS_PLUGIN_LOADER_H_
#define FARCALL_DEVICE_AGENTS_PLUGIN_LOADER_H_

#include <string>

#include "absl/status/status.h"
#include "device_agents/handler_registry.h"

namespace farcall::agent {

// Opens `path`, checks its ABI version and registers its handlers. Errors:
// NOT_FOUND (cannot be opened), INVALID_ARGUMENT (no entry point, or a
// malformed table), FAILED_PRECONDITION (built for another ABI major
// version), ALREADY_EXISTS (a handler name clash). Every message names the
// path.
absl::Status LoadPlugin(const std::string& path, HandlerRegistry& registry);

}  // namespace farcall::agent

#endif  // FARCALL_DEVICE_AGENTS_PLUGIN_LOADER_H_
