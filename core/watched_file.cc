#include "core/watched_file.h"

#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "openssl/sha.h"

namespace farcall {

absl::StatusOr<std::string> ReadConfigFile(const std::string& path, absl::string_view what) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    return absl::NotFoundError(absl::StrCat("cannot read the ", what, " ", path, "."));
  }
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
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
