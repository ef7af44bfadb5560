#include "core/resident_handle.h"

#include <sys/random.h>

#include <algorithm>
#include <cstdint>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/error_reason.h"

namespace farcall {
namespace {

constexpr absl::string_view kPrefix = "res-";

std::string RandomHex(size_t bytes) {
  std::string raw(bytes, '\0');
  size_t got = 0;
  while (got < bytes) {
    const ssize_t n = getrandom(raw.data() + got, bytes - got, 0);
    if (n > 0) got += static_cast<size_t>(n);
  }
  return absl::BytesToHexString(raw);
}

bool IsHex(absl::string_view s, size_t n) {
  if (s.size() != n) return false;
  for (char c : s) {
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c)) || absl::ascii_isupper(c)) {
      return false;
    }
  }
  return true;
}

}  // namespace

std::string NewResidentBoot() { return RandomHex(8); }

std::string NewResidentHandle(absl::string_view boot, absl::string_view agent_id) {
  return absl::StrCat(kPrefix, RandomHex(16), "-", boot, "@", agent_id);
}

absl::StatusOr<ResidentHandle> ParseResidentHandle(absl::string_view text,
                                                   absl::string_view where) {
  auto bad = [&] {
    return absl::InvalidArgumentError(absl::StrCat(
        where, " is not a resident handle (res-SECRET-BOOT@AGENT, as Client::Put returns one)."));
  };
  if (text.size() > kMaxResidentHandleBytes || !absl::StartsWith(text, kPrefix)) return bad();
  absl::string_view rest = text.substr(kPrefix.size());
  const size_t at = rest.find('@');
  if (at == absl::string_view::npos || at != 32 + 1 + 16 || rest[32] != '-') return bad();
  ResidentHandle h;
  h.secret = std::string(rest.substr(0, 32));
  h.boot = std::string(rest.substr(33, 16));
  h.agent_id = std::string(rest.substr(at + 1));
  if (!IsHex(h.secret, 32) || !IsHex(h.boot, 16) || h.agent_id.empty()) return bad();
  return h;
}

std::string ShortHandle(absl::string_view text) {
  const size_t at = text.find('@');
  absl::string_view head = text.substr(0, std::min<size_t>(kPrefix.size() + 8, text.size()));
  return absl::StrCat(head, "…", at == absl::string_view::npos ? "" : text.substr(at));
}

absl::StatusOr<std::string> ResidentHolder(
    const std::vector<std::pair<std::string, std::string>>& named) {
  std::string holder;
  std::string holder_where;
  for (const auto& [where, text] : named) {
    absl::StatusOr<ResidentHandle> h = ParseResidentHandle(text, where);
    if (!h.ok()) return h.status();
    if (holder.empty()) {
      holder = h->agent_id;
      holder_where = where;
    } else if (h->agent_id != holder) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the call names residents on two agents: ", holder_where, " on '", holder, "' and ",
          where, " on '", h->agent_id,
          "'. A call runs on one agent: Get the one and Put it on the other agent first."));
    }
  }
  return holder;
}

absl::Status ResidentLostError(absl::string_view handle, absl::string_view why) {
  return WithReason(absl::NotFoundError(absl::StrCat("resident ", ShortHandle(handle),
                                                     " was lost with its agent: ", why,
                                                     ". Put it again from a snapshot.")),
                    ErrorReason::kResidentLost);
}

}  // namespace farcall
