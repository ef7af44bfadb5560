// Logging for the farcall binaries, through spdlog: one line per event on
// stderr, with time, binary and level, e.g.
//   [2026-12-03 19:30:00.123] [farcall-agent] [warning] call 7f3a failed: ...
// Levels: debug (every call), info (start-up, shutdown), warning (failed
// calls), error. --log_level picks the least severe one written (info).
// Messages never carry tokens; callers pass only what may be shown.
//
// Thread safety: every function here may be called from any thread.
#ifndef FARCALL_CORE_LOG_H_
#define FARCALL_CORE_LOG_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace farcall::log {

// Names the process's log lines `binary` and applies --log_level.
// INVALID_ARGUMENT for an unknown level.
absl::Status InitFromFlags(absl::string_view binary);

bool DebugEnabled();
void Debug(absl::string_view message);
void Info(absl::string_view message);
void Warning(absl::string_view message);
void Error(absl::string_view message);

// The flags of the farcall binaries whose values differ from their
// defaults, as "--name=value ..." (for the start-up line), sorted.
std::string NonDefaultFlags();

// Makes --help list every farcall flag, wherever it is defined (Abseil
// lists only the main file's by default). Call before ParseCommandLine.
void SetUpHelp(absl::string_view usage);

}  // namespace farcall::log

#endif  // FARCALL_CORE_LOG_H_
