// A configuration file that a process reads again while it serves: when its
// bytes change (Kubernetes updates a mounted Secret in place), or on SIGHUP.
//
//   WatchedFile f(path, bytes_loaded_at_start);
//   absl::StatusOr<bool> r = f.Reload(force, [&](const std::string& text) {
//     FARCALL_ASSIGN_OR_RETURN(Keys k, Parse(text));
//     Install(std::move(k));
//     return absl::OkStatus();
//   });
//
// Bytes that failed (unreadable, or refused by `install`) are not tried, and
// so not counted, again until they change, or `force`. Thread-safe.
#ifndef FARCALL_CORE_WATCHED_FILE_H_
#define FARCALL_CORE_WATCHED_FILE_H_

#include <cstdint>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace farcall {

// The largest configuration file (tokens, keys, certificates) read.
inline constexpr int64_t kMaxConfigFileBytes = int64_t{1} << 20;

// The bytes of the regular file at `path`, at most `max_bytes`: NOT_FOUND
// when it cannot be read, INVALID_ARGUMENT when it is not a regular file (a
// directory, a device such as /dev/zero) or is larger. `label` names it in
// the messages ("LABEL: cannot read PATH.").
absl::StatusOr<std::string> ReadRegularFile(const std::string& path, int64_t max_bytes,
                                            absl::string_view label);

// ReadRegularFile within kMaxConfigFileBytes; `what` names the file
// ("tokens file").
absl::StatusOr<std::string> ReadConfigFile(const std::string& path, absl::string_view what);

// The SHA-256 of `bytes`, raw (32 bytes).
std::string Sha256Of(absl::string_view bytes);

class WatchedFile {
 public:
  // `what` names the file in errors ("tokens file"); `loaded` is what was
  // read from it at start.
  WatchedFile(std::string path, std::string what, absl::string_view loaded);

  const std::string& path() const { return path_; }

  // Reads the file and, when its bytes changed since they were last loaded
  // or refused (or `force`), hands them to `install`. True when `install`
  // took them; false when there was nothing to do; the read's or
  // `install`'s error otherwise (what was in use stays).
  absl::StatusOr<bool> Reload(bool force,
                              absl::FunctionRef<absl::Status(const std::string&)> install);

 private:
  const std::string path_;
  const std::string what_;
  absl::Mutex mu_;  // one reload at a time
  std::string loaded_digest_ ABSL_GUARDED_BY(mu_);
  std::string failed_digest_ ABSL_GUARDED_BY(mu_);
};

}  // namespace farcall

#endif  // FARCALL_CORE_WATCHED_FILE_H_
