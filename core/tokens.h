// Bearer tokens: who may call which handler.
//
// A tokens file has one token per line, `TOKEN HANDLER[,HANDLER...]` or
// `TOKEN *` (every handler); blank lines and `#` comments are allowed. Calls
// carry `authorization: Bearer TOKEN`. A file that would leave the server
// open or weak is refused whole: one with no token at all (a server given a
// tokens file never serves without tokens), a token shorter than
// kMinTokenBytes, or a token listed twice.
//
// Each token is a *principal*: the caller it stands for, named
// `token:` and the first 12 hex digits of the token's SHA-256
// (`printf %s TOKEN | sha256sum | cut -c1-12`). Principals key what one
// caller must not see of another's (the exactly-once ledger), and may be
// logged; tokens never are.
//
// A line may go on with `key=value` fields, in any order:
//   tenant=NAME     the token's principal is `tenant:NAME` instead, so that
//                   the tokens of one team share its quotas, its ledger
//                   share and its metrics (NAME: 1 to 64 of [A-Za-z0-9._-]);
//   max_calls=N     the tenant's calls in flight at once, for this tenant
//                   in place of --tenant_max_calls;
//   max_bytes=N     the bytes its calls may hold at once, in place of
//                   --tenant_max_bytes;
//   ledger_bytes=N  its share of the exactly-once ledger, in place of
//                   --call_id_cache_bytes_per_tenant.
// Lines of one tenant that give it different quotas are refused.
//
//   absl::StatusOr<TokenTable> t = TokenTable::Load("/etc/farcall/tokens");
//   absl::Status s = t->Authorize(authorization_value, "axpy");
//
// A table loaded from a file can be reloaded from it (SIGHUP, or the file
// changed on disk: Reload), without a restart: calls in flight keep the
// tokens they were checked against, later ones see the new file. A reload
// that fails (the file unreadable, empty, with a short or repeated token)
// keeps the tokens there were. Copies of a table share its tokens and
// reloads.
//
// A line may name a token by its digest instead, `sha256:HEX` (`printf %s
// TOKEN | sha256sum`): a server that holds only digests holds nothing a
// caller could present, so a copy of its file is no use as a bearer token.
// (Its length cannot be checked: make the token as long as any other.)
//
// Tokens are compared by their SHA-256, in constant time (against every
// entry, whatever matches), and no message or error ever contains one.
// Thread-safe.
#ifndef FARCALL_CORE_TOKENS_H_
#define FARCALL_CORE_TOKENS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "core/watched_file.h"

namespace farcall {

// The metadata key calls carry their token in, and its value's prefix.
inline constexpr char kAuthorizationKey[] = "authorization";
inline constexpr char kBearerPrefix[] = "Bearer ";
// The shortest token a tokens file may hold.
inline constexpr size_t kMinTokenBytes = 16;

// What a tokens-file line sets for its tenant; 0: the server's flag.
struct TenantQuota {
  int64_t max_calls = 0;
  int64_t max_bytes = 0;
  int64_t ledger_bytes = 0;
};

class TokenTable {
 public:
  // An empty table: no tokens required (the default, without --tokens_file).
  TokenTable() = default;
  // INVALID_ARGUMENT naming `source` and the line (never the token).
  static absl::StatusOr<TokenTable> Parse(absl::string_view text, absl::string_view source);
  // Reads and parses `path`; NOT_FOUND when it cannot be read.
  static absl::StatusOr<TokenTable> Load(const std::string& path);

  // Whether calls need a token at all.
  bool required() const { return size() > 0; }
  // How many tokens the table holds.
  size_t size() const;

  // For a table Load made: reads its file again and, when its bytes changed
  // since the last load (or `force`), replaces the tokens. True when it
  // replaced them; the file's error (the tokens stay) when it could not. A
  // file that failed is not tried again until it changes, or `force`.
  // FAILED_PRECONDITION for a table with no file.
  absl::StatusOr<bool> Reload(bool force) const;
  // The file it was loaded from ("" for none).
  std::string path() const;

  // For a call with the `authorization` metadata value `authorization`
  // (empty when absent): OK when no token is required, or the token is
  // known; UNAUTHENTICATED otherwise.
  absl::Status Authenticate(absl::string_view authorization) const;
  // The same, and PERMISSION_DENIED naming `handler` when the token may not
  // call it. `principal` (if given) is set to the caller's principal (""
  // when no token is required or the token is unknown), also when it is
  // refused the handler; on success `quota` (if given) to its line's quotas.
  absl::Status Authorize(absl::string_view authorization, absl::string_view handler,
                         std::string* principal = nullptr, TenantQuota* quota = nullptr) const;
  // The tenants the table names (`tenant:NAME` principals), and each
  // principal of an unnamed token: what a metric may label calls with.
  std::vector<std::string> principals() const;
  // The handlers its lines name (not `*`), each once.
  std::vector<std::string> handlers() const;

 private:
  struct Entry {
    std::string digest;  // the token's SHA-256, raw
    std::string principal;
    bool all = false;
    std::vector<std::string> handlers;
    TenantQuota quota;
  };
  using Entries = std::vector<Entry>;
  // The entry of `entries` whose token equals the presented one, or null;
  // every entry is compared, in time that does not depend on where they
  // differ.
  static const Entry* Find(const Entries& entries, absl::string_view authorization,
                           absl::Status* error);
  // The tokens now (empty for a table with none).
  std::shared_ptr<const Entries> Snapshot() const;

  struct Shared {
    mutable absl::Mutex mu;
    std::shared_ptr<const Entries> entries ABSL_GUARDED_BY(mu);
    std::unique_ptr<WatchedFile> file;  // null unless loaded from a file
  };
  std::shared_ptr<Shared> shared_;  // null: no tokens
};

// The token in a file of its own (the router's --agent_token_file, the
// CLI's --token_file): its first non-blank line, trimmed.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);

// Whether `a` equals `b`, in time that depends only on their lengths: for
// comparing secrets.
bool ConstantTimeEqual(absl::string_view a, absl::string_view b);

// The principal a token stands for (see above).
std::string PrincipalOfToken(absl::string_view token);

}  // namespace farcall

#endif  // FARCALL_CORE_TOKENS_H_
