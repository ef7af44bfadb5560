// The handlers an agent serves, by (name, platform). Filled at start-up from
// the built-ins and plugins, then read concurrently.
//
// Thread safety: Register() before serving; Find() and List() from any
// thread after that.
#ifndef FARCALL_DEVICE_AGENTS_HANDLER_REGISTRY_H_
#define FARCALL_DEVICE_AGENTS_HANDLER_REGISTRY_H_

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/status/status.h"
#include "farcall/handler_api.h"

namespace farcall::agent {

struct RegisteredHandler {
  std::string name;
  std::string platform;
  uint32_t traits = 0;
  FarcallHandlerFn fn = nullptr;
  std::string source;  // "builtin" or the plugin's path
};

class HandlerRegistry {
 public:
  // ALREADY_EXISTS if (name, platform) is taken; INVALID_ARGUMENT for a def
  // with no name, platform or function, or for a platform farcall does not
  // serve. The platform is matched in any case and stored canonical.
  absl::Status Register(const FarcallHandlerDef& def, std::string source);
  // nullptr if not registered. `platform` is a canonical platform name.
  const RegisteredHandler* Find(absl::string_view name,
                                absl::string_view platform) const;
  std::vector<const RegisteredHandler*> List() const;
  // Only those of `platform` (canonical): what an agent of it serves.
  std::vector<const RegisteredHandler*> List(absl::string_view platform) const;

 private:
  std::map<std::pair<std::string, std::string>, RegisteredHandler, std::less<>>
      handlers_;
};

}  // namespace farcall::agent

#endif  // FARCALL_DEVICE_AGENTS_HANDLER_REGISTRY_H_
