// Client::Put, Get and Delete: resident arrays as calls of the built-in
// `copy` (device_agents/resident_store.h says how the agent keeps them).
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/resident_handle.h"
#include "farcall/client.h"

namespace farcall {

std::string Resident::agent_id() const {
  const size_t at = handle.find('@');
  return at == std::string::npos ? "" : handle.substr(at + 1);
}

absl::StatusOr<Resident> Client::Put(const TensorSpec& spec, const void* data,
                                     const std::string& platform, absl::Duration ttl,
                                     const CallOptions& options) {
  CallRequest r;
  r.handler = "copy";
  r.platform = platform;
  // Aliased and kept: the agent keeps the very memory the bytes landed in,
  // with no copy there. Nothing is written back into `data`.
  r.args = {Arg::In(spec, data)};
  r.results = {spec};
  r.aliases = {{0, 0}};
  r.keep_results = {0};
  r.resident_ttl = ttl;
  r.has_side_effect = true;  // a repeat keeps no second copy
  absl::StatusOr<CallResult> out = Call(r, options);
  if (!out.ok()) return out.status();
  if (out->results.size() != 1 || !out->results[0].resident.has_value()) {
    return absl::InternalError("the agent kept no resident for Put.");
  }
  return *std::move(out->results[0].resident);
}

absl::StatusOr<std::vector<ResultTensor>> Client::GetMany(const std::vector<Resident>& residents,
                                                          const CallOptions& options) {
  if (residents.empty()) return std::vector<ResultTensor>();
  CallRequest r;
  r.handler = "copy";
  r.platform = residents[0].platform;
  for (const Resident& x : residents) {
    if (x.platform != r.platform) {
      return absl::InvalidArgumentError(
          absl::StrCat("GetMany takes residents of one agent; they name platforms '", r.platform,
                       "' and '", x.platform, "'."));
    }
    r.args.push_back(Arg::Of(x));
    r.results.push_back(x.spec);
  }
  absl::StatusOr<CallResult> out = Call(r, options);
  if (!out.ok()) return out.status();
  return std::move(out->results);
}

absl::StatusOr<ResultTensor> Client::Get(const Resident& resident, const CallOptions& options) {
  absl::StatusOr<std::vector<ResultTensor>> out = GetMany({resident}, options);
  if (!out.ok()) return out.status();
  return std::move((*out)[0]);
}

absl::Status Client::Delete(const std::vector<Resident>& residents, const CallOptions& options) {
  if (residents.empty()) return absl::OkStatus();
  CallRequest r;
  r.handler = "copy";
  r.platform = residents[0].platform;
  for (const Resident& x : residents) r.release_residents.push_back(x.handle);
  r.has_side_effect = true;  // a repeat frees nothing twice, and says OK
  return Call(r, options).status();
}

}  // namespace farcall
