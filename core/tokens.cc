#include "core/tokens.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "absl/algorithm/container.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/types/span.h"
#include "core/watched_file.h"
#include "openssl/sha.h"

namespace farcall {
namespace {

constexpr char kDigestPrefix[] = "sha256:";

// The raw digest a `sha256:HEX` field names; empty when HEX is not 64 hex
// digits.
std::string DigestOfField(absl::string_view hex) {
  if (hex.size() != 2 * SHA256_DIGEST_LENGTH || !absl::c_all_of(hex, absl::ascii_isxdigit)) {
    return "";
  }
  return absl::HexStringToBytes(hex);
}

std::string PrincipalOfDigest(absl::string_view digest) {
  return absl::StrCat("token:", absl::BytesToHexString(digest.substr(0, 6)));
}

constexpr size_t kMaxTenantName = 64;

bool ValidTenantName(absl::string_view name) {
  return !name.empty() && name.size() <= kMaxTenantName && absl::c_all_of(name, [](char c) {
    return absl::ascii_isalnum(c) || c == '.' || c == '_' || c == '-';
  });
}

// A line's `key=value` fields after the handlers: the tenant's name (empty
// if none) and its quotas. The error says what is wrong, for the caller to
// put after the file and line.
absl::Status ParseTenantFields(absl::Span<const absl::string_view> fields, std::string* tenant,
                               TenantQuota* quota) {
  for (absl::string_view f : fields) {
    std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(f, absl::MaxSplits('=', 1));
    if (kv.first == "tenant") {
      if (!ValidTenantName(kv.second)) {
        return absl::InvalidArgumentError(
            absl::StrCat("a tenant name is 1 to ", kMaxTenantName, " of [A-Za-z0-9._-]."));
      }
      *tenant = std::string(kv.second);
      continue;
    }
    int64_t* value = kv.first == "max_calls"      ? &quota->max_calls
                     : kv.first == "max_bytes"    ? &quota->max_bytes
                     : kv.first == "ledger_bytes" ? &quota->ledger_bytes
                                                  : nullptr;
    if (value == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown field '", kv.first,
                       "' (after the handlers a line may give tenant=, max_calls=, max_bytes= "
                       "and ledger_bytes=)."));
    }
    if (!absl::SimpleAtoi(kv.second, value) || *value <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(kv.first, " must be a positive whole number; got '", kv.second, "'."));
    }
  }
  return absl::OkStatus();
}

}  // namespace

bool ConstantTimeEqual(absl::string_view a, absl::string_view b) {
  const size_t n = std::max(a.size(), b.size());
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= x ^ y;
  }
  return diff == 0;
}

std::string PrincipalOfToken(absl::string_view token) { return PrincipalOfDigest(Sha256Of(token)); }

absl::StatusOr<TokenTable> TokenTable::Parse(absl::string_view text, absl::string_view source) {
  auto entries = std::make_shared<Entries>();
  std::vector<int> lines;  // each entry's line, for the duplicate's message
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line.front() == '#') continue;
    std::vector<absl::string_view> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (fields.size() < 2 || absl::StrContains(fields[1], '=')) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, " line ", line_no,
                       ": expected 'TOKEN HANDLER[,HANDLER...]' or 'TOKEN *', then optional "
                       "tenant=NAME, max_calls=N, max_bytes=N, ledger_bytes=N."));
    }
    Entry e;
    if (absl::StartsWith(fields[0], kDigestPrefix)) {
      e.digest = DigestOfField(fields[0].substr(sizeof(kDigestPrefix) - 1));
      if (e.digest.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(source, " line ", line_no,
                         ": a digest is 'sha256:' and 64 hex digits (printf %s TOKEN | "
                         "sha256sum)."));
      }
    } else if (fields[0].size() < kMinTokenBytes) {
      return absl::InvalidArgumentError(absl::StrCat(source, " line ", line_no,
                                                     ": the token is shorter than ", kMinTokenBytes,
                                                     " bytes; use a long random one."));
    } else {
      e.digest = Sha256Of(fields[0]);
    }
    for (size_t i = 0; i < entries->size(); ++i) {
      if (ConstantTimeEqual((*entries)[i].digest, e.digest)) {
        return absl::InvalidArgumentError(absl::StrCat(
            source, " line ", line_no, ": the token repeats the one on line ", lines[i], "."));
      }
    }
    std::string tenant;
    if (absl::Status s =
            ParseTenantFields(absl::MakeConstSpan(fields).subspan(2), &tenant, &e.quota);
        !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(source, " line ", line_no, ": ", s.message()));
    }
    e.principal = tenant.empty() ? PrincipalOfDigest(e.digest) : absl::StrCat("tenant:", tenant);
    for (size_t i = 0; i < entries->size(); ++i) {
      const Entry& other = (*entries)[i];
      if (other.principal == e.principal && (other.quota.max_calls != e.quota.max_calls ||
                                             other.quota.max_bytes != e.quota.max_bytes ||
                                             other.quota.ledger_bytes != e.quota.ledger_bytes)) {
        return absl::InvalidArgumentError(absl::StrCat(source, " line ", line_no, ": tenant ",
                                                       tenant, " has other quotas on line ",
                                                       lines[i], "; give them alike."));
      }
    }
    if (fields[1] == "*") {
      e.all = true;
    } else {
      for (absl::string_view h : absl::StrSplit(fields[1], ',', absl::SkipEmpty())) {
        e.handlers.emplace_back(h);
      }
    }
    entries->push_back(std::move(e));
    lines.push_back(line_no);
  }
  if (entries->empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the tokens file ", source,
        " holds no token; a server given --tokens_file never serves without tokens (list at "
        "least one 'TOKEN HANDLER[,HANDLER...]' line, or leave the flag out)."));
  }
  TokenTable t;
  t.shared_ = std::make_shared<Shared>();
  absl::MutexLock l(&t.shared_->mu);
  t.shared_->entries = std::move(entries);
  return t;
}

absl::StatusOr<TokenTable> TokenTable::Load(const std::string& path) {
  absl::StatusOr<std::string> text = ReadConfigFile(path, "tokens file");
  if (!text.ok()) return text.status();
  absl::StatusOr<TokenTable> t = Parse(*text, path);
  if (!t.ok()) return t.status();
  t->shared_->file = std::make_unique<WatchedFile>(path, "tokens file", *text);
  return t;
}

absl::StatusOr<bool> TokenTable::Reload(bool force) const {
  if (shared_ == nullptr || shared_->file == nullptr) {
    return absl::FailedPreconditionError("these tokens were not loaded from a file.");
  }
  return shared_->file->Reload(force, [this](const std::string& text) -> absl::Status {
    absl::StatusOr<TokenTable> fresh = Parse(text, shared_->file->path());
    if (!fresh.ok()) return fresh.status();
    std::shared_ptr<const Entries> entries = fresh->Snapshot();
    absl::MutexLock l(&shared_->mu);
    shared_->entries = std::move(entries);
    return absl::OkStatus();
  });
}

std::string TokenTable::path() const {
  return shared_ == nullptr || shared_->file == nullptr ? "" : shared_->file->path();
}

std::shared_ptr<const TokenTable::Entries> TokenTable::Snapshot() const {
  if (shared_ == nullptr) return nullptr;
  absl::MutexLock l(&shared_->mu);
  return shared_->entries;
}

size_t TokenTable::size() const {
  std::shared_ptr<const Entries> e = Snapshot();
  return e == nullptr ? 0 : e->size();
}

const TokenTable::Entry* TokenTable::Find(const Entries& entries, absl::string_view authorization,
                                          absl::Status* error) {
  if (!absl::StartsWith(authorization, kBearerPrefix)) {
    *error = absl::UnauthenticatedError(
        "this server needs a bearer token: send 'authorization: Bearer TOKEN'.");
    return nullptr;
  }
  const std::string digest = Sha256Of(authorization.substr(sizeof(kBearerPrefix) - 1));
  const Entry* found = nullptr;
  for (const Entry& e : entries) {
    // No early exit: every entry is compared whatever matched before.
    const bool eq = ConstantTimeEqual(e.digest, digest);
    if (eq && found == nullptr) found = &e;
  }
  if (found == nullptr) {
    *error = absl::UnauthenticatedError("the bearer token is not known to this server.");
  }
  return found;
}

absl::Status TokenTable::Authenticate(absl::string_view authorization) const {
  std::shared_ptr<const Entries> entries = Snapshot();
  if (entries == nullptr || entries->empty()) return absl::OkStatus();
  absl::Status error;
  return Find(*entries, authorization, &error) != nullptr ? absl::OkStatus() : error;
}

absl::Status TokenTable::Authorize(absl::string_view authorization, absl::string_view handler,
                                   std::string* principal, TenantQuota* quota) const {
  if (principal != nullptr) principal->clear();
  if (quota != nullptr) *quota = {};
  std::shared_ptr<const Entries> entries = Snapshot();  // held while `e` is used
  if (entries == nullptr || entries->empty()) return absl::OkStatus();
  absl::Status error;
  const Entry* e = Find(*entries, authorization, &error);
  if (e == nullptr) return error;
  bool allowed = e->all;
  for (const std::string& h : e->handlers) allowed = allowed || h == handler;
  // The caller is known either way: a refusal names it too (audit lines).
  if (principal != nullptr) *principal = e->principal;
  if (allowed) {
    if (quota != nullptr) *quota = e->quota;
    return absl::OkStatus();
  }
  return absl::PermissionDeniedError(
      absl::StrCat("this token may not call handler '", handler, "'."));
}

std::vector<std::string> TokenTable::principals() const {
  std::vector<std::string> out;
  std::shared_ptr<const Entries> entries = Snapshot();
  if (entries == nullptr) return out;
  for (const Entry& e : *entries) {
    if (absl::c_find(out, e.principal) == out.end()) out.push_back(e.principal);
  }
  return out;
}

std::vector<std::string> TokenTable::handlers() const {
  std::vector<std::string> out;
  std::shared_ptr<const Entries> entries = Snapshot();
  if (entries == nullptr) return out;
  for (const Entry& e : *entries) {
    for (const std::string& h : e.handlers) {
      if (absl::c_find(out, h) == out.end()) out.push_back(h);
    }
  }
  return out;
}

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadConfigFile(path, "token file");
  if (!text.ok()) return text.status();
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (!line.empty() && line.front() != '#') return std::string(line);
  }
  return absl::InvalidArgumentError(absl::StrCat("the token file ", path, " holds no token."));
}

}  // namespace farcall
