#include "core/call_validation.h"
#include "absl/strings/string_view.h"
#include "core/error_reason.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"

namespace farcall {
namespace {

// The platform, and whether the call named "gpu" for it.
absl::StatusOr<std::pair<Platform, bool>> ValidatePlatforms(
    const std::vector<std::string>& platforms) {
  if (platforms.empty()) {
    return absl::InvalidArgumentError(
        "buffer_callback needs exactly one platform; the call names none.");
  }
  if (platforms.size() > 1) {
    return absl::UnimplementedError("multi-platform lowering for buffer_callback");
  }
  if (IsGpuAlias(platforms[0])) return std::make_pair(Platform::kCuda, true);
  std::optional<Platform> p = ParsePlatform(platforms[0]);
  if (!p) return UnsupportedPlatformError(platforms[0]);
  return std::make_pair(*p, false);
}

absl::Status ValidateSpecs(const std::vector<TensorSpec>& specs, absl::string_view what,
                           std::vector<int64_t>* bytes) {
  for (size_t i = 0; i < specs.size(); ++i) {
    FARCALL_ASSIGN_OR_RETURN(int64_t b, ByteSize(specs[i], absl::StrCat(what, "[", i, "]")));
    bytes->push_back(b);
  }
  return absl::OkStatus();
}

std::string Mapping(uint32_t i, uint32_t o) { return absl::StrCat("'", i, ":", o, "'"); }

absl::Status ValidateAliases(const CallDescriptor& call, std::vector<int64_t>* result_alias) {
  result_alias->assign(call.results.size(), -1);
  for (const auto& [i, o] : call.aliases) {
    if (i >= call.args.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("input_output_aliases contains the mapping ", Mapping(i, o),
                       " with input index ", i, " outside the range [0, ", call.args.size(), ")."));
    }
    if (o >= call.results.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "input_output_aliases contains the mapping ", Mapping(i, o), " with output index ", o,
          " outside the range [0, ", call.results.size(), ")."));
    }
    if (call.args[i] != call.results[o]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "input_output_aliases contains the mapping ", Mapping(i, o),
          " referring to an input with abstract value ", SpecToString(call.args[i]),
          " and an output with a different abstract value ", SpecToString(call.results[o]), "."));
    }
    if ((*result_alias)[o] >= 0) {
      return absl::InvalidArgumentError(absl::StrCat("input_output_aliases maps inputs ",
                                                     (*result_alias)[o], " and ", i,
                                                     " to the same output ", o, "."));
    }
    (*result_alias)[o] = i;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ValidatedCall> ValidateCall(const CallDescriptor& call, int64_t max_call_bytes,
                                           absl::string_view limit_owner) {
  ValidatedCall v;
  FARCALL_ASSIGN_OR_RETURN(auto platform, ValidatePlatforms(call.platforms));
  v.platform = platform.first;
  v.any_gpu = platform.second;
  if (call.handler.empty()) {
    return absl::InvalidArgumentError("the call names no handler.");
  }
  FARCALL_RETURN_IF_ERROR(ValidateSpecs(call.args, "args", &v.arg_bytes));
  FARCALL_RETURN_IF_ERROR(ValidateSpecs(call.results, "results", &v.result_bytes));
  FARCALL_RETURN_IF_ERROR(ValidateAliases(call, &v.result_alias));

  // Sums can overflow even when each tensor fits; saturate instead.
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  int64_t total = 0;
  auto add = [&](int64_t b) { total = (b > kMax - total) ? kMax : total + b; };
  for (int64_t b : v.arg_bytes) add(b);
  for (size_t o = 0; o < v.result_bytes.size(); ++o) {
    if (v.result_alias[o] < 0) add(v.result_bytes[o]);
  }
  v.footprint_bytes = total;
  if (max_call_bytes > 0 && total > max_call_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the call needs ", total, " bytes for its tensors, over the ", limit_owner,
                     "'s limit of ", max_call_bytes, " bytes per call."));
  }
  return v;
}

absl::Status HandlerNotFoundError(absl::string_view handler, absl::string_view platform,
                                  std::vector<std::string> registered) {
  std::string message =
      absl::StrCat("handler '", handler, "' is not registered for platform '", platform, "'.");
  if (!registered.empty()) {
    constexpr size_t kNamed = 24;
    std::sort(registered.begin(), registered.end());
    registered.erase(std::unique(registered.begin(), registered.end()), registered.end());
    const size_t more = registered.size() > kNamed ? registered.size() - kNamed : 0;
    registered.resize(registered.size() - more);
    absl::StrAppend(&message, " Registered there: ", absl::StrJoin(registered, ", "),
                    more > 0 ? absl::StrCat(" and ", more, " more") : "", ".");
  }
  return absl::NotFoundError(message);
}

absl::Status UnsupportedPlatformError(absl::string_view platform) {
  return absl::InvalidArgumentError(
      absl::StrCat("`buffer_callback` not supported on ", platform, " backend."));
}

absl::Status NoLiveAgentError(absl::string_view platform) {
  return WithReason(
      absl::UnavailableError(absl::StrCat("no live agent serves platform '", platform, "'.")),
      ErrorReason::kNoLiveAgent);
}

absl::Status PlatformNotServedError(absl::string_view served, absl::string_view requested) {
  return absl::FailedPreconditionError(absl::StrCat("this agent serves platform '", served,
                                                    "', but the call asks for platform '",
                                                    requested, "'."));
}

}  // namespace farcall
