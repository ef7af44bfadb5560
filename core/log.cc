#include "core/log.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpc/support/log.h"
#include "spdlog/sinks/stdout_sinks.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, log_level, "info",
          "least severe log lines written: debug (one per call), info, warning (failed "
          "calls) or error");
ABSL_FLAG(std::string, log_format, "text",
          "text (one readable line per event) or json (one JSON object per line, UTC times, "
          "with the call id, handler and caller's principal on a call's lines)");

namespace farcall::log {
namespace {

std::shared_ptr<spdlog::logger>& Logger() {
  static auto* logger = new std::shared_ptr<spdlog::logger>(std::make_shared<spdlog::logger>(
      "farcall", std::make_shared<spdlog::sinks::stderr_sink_mt>()));
  return *logger;
}

std::atomic<bool> json{false};
// The binary's name, for JSON lines (set once, before threads log).
std::string& Binary() {
  static auto* binary = new std::string("farcall");
  return *binary;
}

spdlog::level::level_enum SpdLevel(Level level) {
  switch (level) {
    case Level::kDebug:
      return spdlog::level::debug;
    case Level::kInfo:
      return spdlog::level::info;
    case Level::kWarning:
      return spdlog::level::warn;
    case Level::kError:
      break;
  }
  return spdlog::level::err;
}

const char* LevelName(Level level) {
  switch (level) {
    case Level::kDebug:
      return "debug";
    case Level::kInfo:
      return "info";
    case Level::kWarning:
      return "warning";
    case Level::kError:
      break;
  }
  return "error";
}

void AddField(std::string& line, absl::string_view name, absl::string_view value) {
  if (value.empty()) return;
  absl::StrAppend(&line, ",\"", name, "\":\"", JsonEscape(value), "\"");
}

// One JSON object; `extra` is more fields, already written (",\"k\":v").
std::string JsonLine(Level level, absl::string_view message, const CallFields& call,
                     absl::string_view extra = "") {
  std::string line = absl::StrCat(
      "{\"time\":\"", absl::FormatTime("%Y-%m-%dT%H:%M:%E6SZ", absl::Now(), absl::UTCTimeZone()),
      "\",\"level\":\"", LevelName(level), "\",\"binary\":\"", JsonEscape(Binary()), "\"");
  AddField(line, "message", message);
  AddField(line, "call_id", call.call_id);
  AddField(line, "handler", call.handler);
  AddField(line, "principal", call.principal);
  AddField(line, "peer", call.peer);
  AddField(line, "code", call.code);
  absl::StrAppend(&line, extra, "}");
  return line;
}

void Emit(Level level, absl::string_view message, const CallFields& call,
          absl::string_view extra = "") {
  const spdlog::level::level_enum l = SpdLevel(level);
  if (!Logger()->should_log(l)) return;
  if (json.load(std::memory_order_relaxed)) {
    const std::string line = JsonLine(level, message, call, extra);
    Logger()->log(l, spdlog::string_view_t(line.data(), line.size()));
  } else {
    const std::string line = EscapeControl(message);
    Logger()->log(l, spdlog::string_view_t(line.data(), line.size()));
  }
}

// gRPC writes a line for every failed connection (a client whose TLS
// handshake fails, say with the wrong server name, retries every second or
// so): each place in gRPC's source writes at most one line per
// kGrpcLineInterval, and the next line from it after a pause says how many
// were left out. gRPC's places are few, so the map stays small.
std::atomic<int64_t> grpc_line_interval_ms{10000};

// Whether the line from `file`:`line` is written now; `left_out` is how
// many from there were not, since the last one written. `file` is gRPC's
// own string (__FILE__): its address names the place.
bool GrpcLineAllowed(const char* file, int line, uint64_t* left_out) {
  struct Place {
    absl::Time last = absl::InfinitePast();
    uint64_t left_out = 0;
  };
  static absl::Mutex mu(absl::kConstInit);
  static auto* places = new std::map<std::pair<const char*, int>, Place>();
  const absl::Time now = absl::Now();
  const absl::Duration interval =
      absl::Milliseconds(grpc_line_interval_ms.load(std::memory_order_relaxed));
  absl::MutexLock l(&mu);
  Place& p = (*places)[{file, line}];
  if (now - p.last < interval) {
    ++p.left_out;
    return false;
  }
  p.last = now;
  *left_out = std::exchange(p.left_out, 0);
  return true;
}

// gRPC's log lines, through the same logger.
void FromGrpc(gpr_log_func_args* args) {
  const Level level = args->severity == GPR_LOG_SEVERITY_ERROR  ? Level::kError
                      : args->severity == GPR_LOG_SEVERITY_INFO ? Level::kInfo
                                                                : Level::kDebug;
  // A line the level leaves out costs no lock.
  if (!Logger()->should_log(SpdLevel(level))) return;
  const char* file = args->file != nullptr ? args->file : "?";
  uint64_t left_out = 0;
  if (!GrpcLineAllowed(file, args->line, &left_out)) return;
  if (const char* slash = std::strrchr(file, '/')) file = slash + 1;
  std::string text(args->message != nullptr ? args->message : "");
  if (left_out > 0) {
    absl::StrAppend(&text, " (and ", left_out, " more from here since the last line, left out)");
  }
  const absl::string_view message = text;
  if (json.load(std::memory_order_relaxed)) {
    Emit(level, message, {},
         absl::StrCat(",\"source\":\"grpc\",\"file\":\"", JsonEscape(file),
                      "\",\"line\":", args->line));
  } else {
    Emit(level, absl::StrCat("grpc: ", file, ":", args->line, ": ", message), {});
  }
}

// Flags of farcall's own sources (Abseil's and gRPC's stay out of --help).
bool IsFarcallFlagFile(absl::string_view file) {
  return absl::StrContains(file, "farcall") || absl::StrContains(file, "core/") ||
         absl::StrContains(file, "device_agents/") || absl::StrContains(file, "server/") ||
         absl::StrContains(file, "client/") || absl::StrContains(file, "python/ext/");
}

}  // namespace

void SetGrpcLineIntervalForTest(absl::Duration interval) {
  grpc_line_interval_ms.store(absl::ToInt64Milliseconds(interval), std::memory_order_relaxed);
}

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
  const std::string format = absl::AsciiStrToLower(absl::GetFlag(FLAGS_log_format));
  if (format != "text" && format != "json") {
    return absl::InvalidArgumentError(
        absl::StrCat("--log_format must be text or json; got '", format, "'."));
  }
  Binary() = std::string(binary);
  json = format == "json";
  Logger()->set_pattern(json ? std::string("%v")
                             : absl::StrCat("[%Y-%m-%d %H:%M:%S.%e] [", binary, "] [%l] %v"));
  Logger()->set_level(l);
  Logger()->flush_on(spdlog::level::trace);
  gpr_set_log_function(FromGrpc);
  return absl::OkStatus();
}

bool DebugEnabled() { return Logger()->should_log(spdlog::level::debug); }
void Write(Level level, absl::string_view message, const CallFields& call) {
  Emit(level, message, call);
}
void Debug(absl::string_view message) { Emit(Level::kDebug, message, {}); }
void Info(absl::string_view message) { Emit(Level::kInfo, message, {}); }
void Warning(absl::string_view message) { Emit(Level::kWarning, message, {}); }
void Error(absl::string_view message) { Emit(Level::kError, message, {}); }

std::string PrintableCallId(absl::string_view id) {
  static std::atomic<uint64_t> next{1};
  if (id.empty()) return absl::StrCat("#", next.fetch_add(1, std::memory_order_relaxed));
  std::string out;
  for (char c : id.substr(0, 64)) out.push_back(absl::ascii_isgraph(c) ? c : '?');
  return out;
}

std::string EscapeControl(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      absl::StrAppend(&out, "\\x", absl::Hex(c, absl::kZeroPad2));
    } else {
      out.push_back(ch);
    }
  }
  return out;
}

std::string JsonEscape(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  for (size_t i = 0; i < n;) {
    const unsigned char c = p[i];
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
      ++i;
    } else if (c < 0x20 || c == 0x7f) {
      if (c == '\n') {
        out += "\\n";
      } else if (c == '\t') {
        out += "\\t";
      } else {
        absl::StrAppend(&out, "\\u00", absl::Hex(c, absl::kZeroPad2));
      }
      ++i;
    } else if (c < 0x80) {
      out.push_back(static_cast<char>(c));
      ++i;
    } else {
      // A UTF-8 sequence: its length from the lead byte, then continuation
      // bytes, no overlong forms, surrogates or values past U+10FFFF.
      size_t len = 0;
      uint32_t cp = 0;
      if (c >= 0xc2 && c <= 0xdf) {
        len = 2, cp = c & 0x1f;
      } else if (c >= 0xe0 && c <= 0xef) {
        len = 3, cp = c & 0x0f;
      } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4, cp = c & 0x07;
      }
      bool ok = len > 0 && i + len <= n;
      for (size_t k = 1; ok && k < len; ++k) {
        ok = (p[i + k] & 0xc0) == 0x80;
        cp = (cp << 6) | (p[i + k] & 0x3f);
      }
      ok = ok && !(len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) &&
           !(len == 4 && (cp < 0x10000 || cp > 0x10ffff));
      if (ok) {
        out.append(text.data() + i, len);
        i += len;
      } else {
        out += "\xef\xbf\xbd";  // U+FFFD
        ++i;
      }
    }
  }
  return out;
}

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
