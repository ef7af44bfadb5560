// The handlers an agent serves, by (name, platform). Filled at start-up from
// the built-ins and plugins, then read concurrently.
//
// Thread safety: Register() before serving; Find() and List() from any
// thread after that.
#ifndef FARCALL_DEVICE_AGENTS_HANDLER_REGISTRY_H_
#define FARCALL_DEVICE_AGENTS_HANDLER_REGISTRY_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "device_agents/handler_runtime.h"
#include "farcall/handler_api.h"

namespace farcall::agent {

class WorkerPool;

struct RegisteredHandler {
  std::string name;
  std::string platform;
  uint32_t traits = 0;
  FarcallHandlerFn fn = nullptr;
  std::string source;  // "builtin", the plugin's path, or the embedder's name
  // In-process handlers, registered by a program that embeds the agent (the
  // Python agent): `invoke` runs instead of `fn`, and calls run on `pool`,
  // their own threads, so that a slow one never holds a native handler's
  // worker. Both null for built-ins and plugins.
  std::function<absl::Status(const HandlerInvocation&)> invoke;
  std::shared_ptr<WorkerPool> pool;
};

// Runs `handler` once on the calling thread.
inline absl::Status RunHandler(const RegisteredHandler& handler, const HandlerInvocation& inv) {
  return handler.invoke ? handler.invoke(inv) : InvokeHandler(handler.fn, inv);
}

class HandlerRegistry {
 public:
  // ALREADY_EXISTS if (name, platform) is taken; INVALID_ARGUMENT for a def
  // with no name, platform or function, or for a platform farcall does not
  // serve. The platform is matched in any case and stored canonical.
  absl::Status Register(const FarcallHandlerDef& def, std::string source);
  // The same for an in-process handler (`invoke` set, `fn` unused).
  absl::Status RegisterInProcess(RegisteredHandler handler);
  // Removes every handler named `name` (all platforms), so that calls to it
  // get NOT_FOUND. NOT_FOUND if none has that name (a typo in a flag).
  absl::Status Disable(absl::string_view name);
  // nullptr if not registered. `platform` is a canonical platform name.
  const RegisteredHandler* Find(absl::string_view name, absl::string_view platform) const;
  std::vector<const RegisteredHandler*> List() const;
  // Only those of `platform` (canonical): what an agent of it serves.
  std::vector<const RegisteredHandler*> List(absl::string_view platform) const;

 private:
  absl::Status Add(RegisteredHandler h);
  std::map<std::pair<std::string, std::string>, RegisteredHandler, std::less<>> handlers_;
};

}  // namespace farcall::agent

#endif  // FARCALL_DEVICE_AGENTS_HANDLER_REGISTRY_H_
