// The built-in handlers of the CPU agent (builtins/builtin_handlers.h run by
// host loops): copy, scale, axpy, add, sum, crc32c, sleep and fail, with
// the semantics of ARCHITECTURE.md. They are written against the plugin SDK
// (farcall/handler.h) like any plugin, so the agent registers them the same
// way it registers a plugin's handlers.
//
// Every handler checks its frame (counts, dtypes, specs, attributes) and
// answers INVALID_ARGUMENT with a message that starts with its name, e.g.
// "axpy: x and y must have the same spec, got float32[4] and float32[5]".
// Handlers keep no state and may run concurrently.
//
//   for (const FarcallHandlerDef& def : BuiltinHandlers()) registry.Add(def);
#ifndef FARCALL_DEVICE_AGENTS_CPU_BUILTIN_HANDLERS_H_
#define FARCALL_DEVICE_AGENTS_CPU_BUILTIN_HANDLERS_H_

#include <span>

#include "farcall/handler_api.h"

namespace farcall::agent::cpu {

// The definitions, all for platform "cpu". Static storage: the span and the
// strings in it live for the whole process.
std::span<const FarcallHandlerDef> BuiltinHandlers();

}  // namespace farcall::agent::cpu

#endif  // FARCALL_DEVICE_AGENTS_CPU_BUILTIN_HANDLERS_H_
