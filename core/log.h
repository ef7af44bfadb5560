// Logging for the farcall binaries, through spdlog: one line per event on
// stderr, with time, binary and level, e.g.
//   [2026-12-03 19:30:00.123] [farcall-agent] [warning] call 7f3a copy ...: INTERNAL: ...
// or, with --log_format=json, one JSON object per line, for log shippers:
//   {"time":"2026-12-03T19:30:00.123456Z","level":"warning","binary":"farcall-agent",
//    "message":"call 7f3a copy ...","call_id":"7f3a","handler":"copy",
//    "principal":"9c1e04b2aa31","peer":"ipv4:10.0.0.7:41234","code":"INTERNAL"}
// (UTC; the call fields only on lines about one call, and only those
// known). gRPC's own lines (GRPC_VERBOSITY, by default errors only) go
// through the same logger, with "source":"grpc" and their file and line.
// Levels: debug (every call), info (start-up, shutdown), warning (failed
// calls), error. --log_level picks the least severe one written (info).
// Messages never carry tokens; callers pass only what may be shown (a
// principal is a token's hash, core/tokens.h).
//
// Thread safety: every function here may be called from any thread.
#ifndef FARCALL_CORE_LOG_H_
#define FARCALL_CORE_LOG_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace farcall::log {

// Names the process's log lines `binary`, applies --log_level and
// --log_format, and takes over gRPC's log lines. INVALID_ARGUMENT for an
// unknown level or format.
absl::Status InitFromFlags(absl::string_view binary);

enum class Level { kDebug, kInfo, kWarning, kError };

// What a line about one call says of it, as JSON fields; empty: unknown.
// Text lines show only the message, which should say the same.
struct CallFields {
  absl::string_view call_id;  // as PrintableCallId gives it
  absl::string_view handler;
  absl::string_view principal;  // the caller's (core/tokens.h)
  absl::string_view peer;
  absl::string_view code;  // the status code's name, e.g. "INTERNAL"
};

bool DebugEnabled();
void Write(Level level, absl::string_view message, const CallFields& call = {});
void Debug(absl::string_view message);
void Info(absl::string_view message);
void Warning(absl::string_view message);
void Error(absl::string_view message);

// A client's call id as a log line may show it: printable, at most 64
// bytes, or this process's own number for the call ("#12") when the client
// gave none.
std::string PrintableCallId(absl::string_view id);

// `text` as the inside of a JSON string: quotes, backslashes and control
// characters escaped, bytes that are not UTF-8 replaced by U+FFFD.
std::string JsonEscape(absl::string_view text);
// `text` as one text log line: control characters (a newline above all,
// which would start a forged line) written as \n, \r, \t or \xHH, and
// backslashes doubled so that an escape cannot be forged either. Every
// text line goes through it: callers choose handler and platform names.
std::string EscapeControl(absl::string_view text);

// The flags of the farcall binaries whose values differ from their
// defaults, as "--name=value ..." (for the start-up line), sorted.
std::string NonDefaultFlags();

// How long each place in gRPC's source stays quiet after a line (10 s);
// for tests.
void SetGrpcLineIntervalForTest(absl::Duration interval);

// Makes --help list every farcall flag, wherever it is defined (Abseil
// lists only the main file's by default). Call before ParseCommandLine.
void SetUpHelp(absl::string_view usage);

}  // namespace farcall::log

#endif  // FARCALL_CORE_LOG_H_
