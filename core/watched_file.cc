#include "core/watched_file.h"

#include <filesystem>
#include <fstream>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "openssl/sha.h"

namespace farcall {

absl::StatusOr<std::string> ReadRegularFile(const std::string& path, int64_t max_bytes,
                                            absl::string_view label) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) return absl::NotFoundError(absl::StrCat(label, ": cannot read ", path, "."));
  // A directory opens too, and its "size" is the largest offset; a device
  // never ends: say what it is. (A symbolic link to a file, as a mounted
  // Kubernetes secret is, is a file.)
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return absl::InvalidArgumentError(absl::StrCat(label, ": ", path, " is not a regular file."));
  }
  const std::streamoff size = f.tellg();
  if (size < 0 || size > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": ", path, " is larger than ", max_bytes, " bytes."));
  }
  std::string bytes(static_cast<size_t>(size), '\0');
  f.seekg(0);
  if (!f.read(bytes.data(), size)) {
    return absl::NotFoundError(absl::StrCat(label, ": cannot read ", path, "."));
  }
  return bytes;
}

absl::StatusOr<std::string> ReadConfigFile(const std::string& path, absl::string_view what) {
  return ReadRegularFile(path, kMaxConfigFileBytes, what);
}

std::string Sha256Of(absl::string_view bytes) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), digest);
  return std::string(reinterpret_cast<const char*>(digest), sizeof(digest));
}

WatchedFile::WatchedFile(std::string path, std::string what, absl::string_view loaded)
    : path_(std::move(path)), what_(std::move(what)), loaded_digest_(Sha256Of(loaded)) {}

absl::StatusOr<bool> WatchedFile::Reload(
    bool force, absl::FunctionRef<absl::Status(const std::string&)> install) {
  absl::MutexLock l(&mu_);
  absl::StatusOr<std::string> text = ReadConfigFile(path_, what_);
  // An unreadable file has failed like a bad one: not tried (and counted)
  // again every tick until it changes, or `force`.
  const std::string digest =
      text.ok() ? Sha256Of(*text) : absl::StrCat("unreadable: ", text.status().message());
  if (!force && (digest == loaded_digest_ || digest == failed_digest_)) return false;
  absl::Status s = text.ok() ? install(*text) : text.status();
  if (!s.ok()) {
    failed_digest_ = digest;
    return s;
  }
  loaded_digest_ = digest;
  failed_digest_.clear();
  return true;
}

}  // namespace farcall
