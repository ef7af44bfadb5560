#include "device_agents/plugin_loader.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstddef>

#include "absl/strings/str_cat.h"
#include "farcall/handler_api.h"

namespace farcall::agent {

absl::Status LoadPlugin(const std::string& path, HandlerRegistry& registry) {
  // dlopen looks for a name without a slash on the library search path
  // only; a plugin file in the working directory is what a user means.
  const bool bare = path.find('/') == std::string::npos;
  const std::string to_open = bare && access(path.c_str(), F_OK) == 0 ? "./" + path : path;
  // RTLD_LOCAL keeps one plugin's symbols from resolving another's.
  void* lib = dlopen(to_open.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    return absl::NotFoundError(absl::StrCat(
        "cannot load plugin '", path, "': ", dlerror(),
        bare ? " (a name without '/' is looked for in the working directory, then on the "
               "library search path)"
             : ""));
  }
  auto get = reinterpret_cast<FarcallPluginGetFn>(dlsym(lib, FARCALL_PLUGIN_ENTRY_SYMBOL));
  if (get == nullptr) {
    dlclose(lib);
    return absl::InvalidArgumentError(absl::StrCat("plugin '", path, "' does not export ",
                                                   FARCALL_PLUGIN_ENTRY_SYMBOL,
                                                   "; define it with FARCALL_PLUGIN."));
  }
  const FarcallPlugin* plugin = get();
  constexpr size_t kNeed = offsetof(FarcallPlugin, handlers) + sizeof(void*);
  if (plugin == nullptr || plugin->struct_size < kNeed) {
    dlclose(lib);
    return absl::InvalidArgumentError(
        absl::StrCat("plugin '", path, "' returned a malformed plugin table."));
  }
  // A copy: the plugin's memory is gone once it is closed.
  const FarcallApiVersion v = plugin->api_version;
  if (v.major != FARCALL_API_MAJOR) {
    dlclose(lib);
    return absl::FailedPreconditionError(absl::StrCat(
        "plugin '", path, "' was built for farcall handler ABI ", v.major, ".", v.minor,
        ", but this agent speaks ABI ", FARCALL_API_MAJOR, ".", FARCALL_API_MINOR,
        "; rebuild the plugin against this agent's "
        "farcall/handler_api.h."));
  }
  for (size_t i = 0; i < plugin->num_handlers; ++i) {
    const FarcallHandlerDef& def = plugin->handlers[i];
    if (def.struct_size < sizeof(FarcallHandlerDef)) {
      return absl::InvalidArgumentError(
          absl::StrCat("plugin '", path, "': handler definition ", i, " is too small."));
    }
    absl::Status s = registry.Register(def, path);
    if (!s.ok()) return s;
  }
  // The handlers' code lives in `lib`: it is never closed.
  return absl::OkStatus();
}

}  // namespace farcall::agent
