#include "core/log.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "spdlog/sinks/stdout_sinks.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, log_level, "info",
          "least severe log lines written: debug (one per call), info, warning (failed "
          "calls) or error");

namespace farcall::log {
namespace {

std::shared_ptr<spdlog::logger>& Logger() {
  static auto* logger = new std::shared_ptr<spdlog::logger>(std::make_shared<spdlog::logger>(
      "farcall", std::make_shared<spdlog::sinks::stderr_sink_mt>()));
  return *logger;
}

void Write(spdlog::level::level_enum level, absl::string_view message) {
  Logger()->log(level, spdlog::string_view_t(message.data(), message.size()));
}

// Flags of farcall's own sources (Abseil's and gRPC's stay out of --help).
bool IsFarcallFlagFile(absl::string_view file) {
  return absl::StrContains(file, "farcall") || absl::StrContains(file, "core/") ||
         absl::StrContains(file, "device_agents/") || absl::StrContains(file, "server/") ||
         absl::StrContains(file, "client/") || absl::StrContains(file, "python/ext/");
}

}  // namespace

absl::Status InitFromFlags(absl::string_view binary) {
  const std::string level = absl::AsciiStrToLower(absl::GetFlag(FLAGS_log_level));
  spdlog::level::level_enum l;
  if (level == "debug") {
    l = spdlog::level::debug;
  } else if (level == "info") {
    l = spdlog::level::info;
  } else if (level == "warning" || level == "warn") {
    l = spdlog::level::warn;
  } else if (level == "error") {
    l = spdlog::level::err;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--log_level must be debug, info, warning or error; got '", level, "'."));
  }
  Logger()->set_pattern(absl::StrCat("[%Y-%m-%d %H:%M:%S.%e] [", binary, "] [%l] %v"));
  Logger()->set_level(l);
  Logger()->flush_on(spdlog::level::trace);
  return absl::OkStatus();
}

bool DebugEnabled() { return Logger()->should_log(spdlog::level::debug); }
void Debug(absl::string_view message) { Write(spdlog::level::debug, message); }
void Info(absl::string_view message) { Write(spdlog::level::info, message); }
void Warning(absl::string_view message) { Write(spdlog::level::warn, message); }
void Error(absl::string_view message) { Write(spdlog::level::err, message); }

std::string NonDefaultFlags() {
  std::vector<std::string> set;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (!IsFarcallFlagFile(flag->Filename()) || name == "ready_fd") continue;
    if (flag->CurrentValue() != flag->DefaultValue()) {
      set.push_back(absl::StrCat("--", name, "=", flag->CurrentValue()));
    }
  }
  std::sort(set.begin(), set.end());
  return set.empty() ? "(all defaults)" : absl::StrJoin(set, " ");
}

void SetUpHelp(absl::string_view usage) {
  absl::FlagsUsageConfig config;
  config.contains_helpshort_flags = IsFarcallFlagFile;
  config.contains_help_flags = IsFarcallFlagFile;
  absl::SetFlagsUsageConfig(config);
  absl::SetProgramUsageMessage(usage);
}

}  // namespace farcall::log
