#include "device_agents/handler_registry.h"
#include "absl/strings/string_view.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "core/platform.h"

namespace farcall::agent {

absl::Status HandlerRegistry::Register(const FarcallHandlerDef& def, std::string source) {
  if (def.name == nullptr || def.name[0] == '\0' || def.platform == nullptr || def.fn == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("handler definition from ", source, " lacks a name, platform or function."));
  }
  RegisteredHandler h;
  h.name = def.name;
  h.platform = def.platform;
  h.traits = def.traits;
  h.fn = def.fn;
  h.source = std::move(source);
  return Add(std::move(h));
}

absl::Status HandlerRegistry::RegisterInProcess(RegisteredHandler handler) {
  if (handler.name.empty() || !handler.invoke) {
    return absl::InvalidArgumentError(
        absl::StrCat("handler definition from ", handler.source, " lacks a name or function."));
  }
  handler.fn = nullptr;
  return Add(std::move(handler));
}

absl::Status HandlerRegistry::Add(RegisteredHandler h) {
  // Platform names are matched in any case, as in JAX; stored canonical.
  std::optional<Platform> platform = ParsePlatform(h.platform);
  if (!platform) {
    return absl::InvalidArgumentError(
        absl::StrCat("handler '", h.name, "' from ", h.source, " is for platform '", h.platform,
                     "', which farcall does not serve (cpu, cuda, rocm or oneapi)."));
  }
  h.platform = std::string(PlatformName(*platform));
  auto key = std::make_pair(h.name, h.platform);
  auto it = handlers_.find(key);
  if (it != handlers_.end()) {
    return absl::AlreadyExistsError(
        absl::StrCat("handler '", h.name, "' for platform '", h.platform, "' from ", h.source,
                     " is already registered by ", it->second.source, "."));
  }
  handlers_.emplace(std::move(key), std::move(h));
  return absl::OkStatus();
}

absl::Status HandlerRegistry::Disable(absl::string_view name) {
  bool found = false;
  for (auto it = handlers_.begin(); it != handlers_.end();) {
    if (it->first.first == name) {
      it = handlers_.erase(it);
      found = true;
    } else {
      ++it;
    }
  }
  if (!found) {
    return absl::NotFoundError(
        absl::StrCat("--disable_handlers names '", name, "', which this agent does not have."));
  }
  return absl::OkStatus();
}

const RegisteredHandler* HandlerRegistry::Find(absl::string_view name,
                                               absl::string_view platform) const {
  auto it = handlers_.find(std::make_pair(std::string(name), std::string(platform)));
  return it == handlers_.end() ? nullptr : &it->second;
}

std::vector<const RegisteredHandler*> HandlerRegistry::List() const {
  std::vector<const RegisteredHandler*> out;
  for (const auto& [key, h] : handlers_) out.push_back(&h);
  return out;
}

std::vector<const RegisteredHandler*> HandlerRegistry::List(absl::string_view platform) const {
  std::vector<const RegisteredHandler*> out;
  for (const auto& [key, h] : handlers_) {
    if (h.platform == platform) out.push_back(&h);
  }
  return out;
}

}  // namespace farcall::agent
