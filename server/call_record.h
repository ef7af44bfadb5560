// The record of one routed call, and the router's call metrics it counts
// (declared once, in call_record.cc): labels (the caller's `tenant` among
// them, core/tenant_labels.h), timing, bytes in and out, refusals by reason, and the last agent
// tried, whose error counts for the status page when the call fails; a failed call's log line
// (every call's, at --log_level=debug).
//
// Thread safety: a CallRecord may be used from any of its call's threads.
#ifndef FARCALL_SERVER_CALL_RECORD_H_
#define FARCALL_SERVER_CALL_RECORD_H_

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "core/platform.h"
#include "grpcpp/support/status.h"
#include "server/agent_pool.h"

namespace farcall::router {

class CallRecord {
 public:
  // Who calls, for the log line of a failed call: the caller's address,
  // then the call's id and the caller's principal once it is authorized.
  CallRecord& From(absl::string_view peer) {
    peer_ = std::string(peer);
    return *this;
  }
  void Identify(absl::string_view call_id, absl::string_view principal);
  void Routed(Platform p, const std::string& handler);
  // Refused before reaching an agent: limit, auth, platform, no_agent or
  // draining.
  void Refused(const char* reason);
  void Attempt(std::shared_ptr<AgentHandle> agent);
  void Retried();
  void Received(size_t bytes);
  void Sent(size_t bytes);
  void Finished(const grpc::Status& s);

 private:
  absl::Time start_ = absl::Now();
  std::string platform_ = "-";
  std::string handler_ = "-";
  std::string call_id_, principal_, peer_;
  std::string tenant_ = "-";  // the metrics' label for principal_
  const char* refused_ = "";  // Refused's reason
  absl::Mutex mu_;
  std::shared_ptr<AgentHandle> agent_ ABSL_GUARDED_BY(mu_);  // the last one tried
};

// farcall_router_resolves_total: one Resolve answered (lookaside routing:
// the call itself then goes straight to an agent). The platform and
// handler label only answers that named agents; refusals count as "-".
void CountResolve(absl::string_view platform, absl::string_view handler, absl::StatusCode code);

// Creates the router's series that have no per-call labels, at zero.
void ExportRouterSeries();
// The `tenant` label's cap (--metrics_max_tenants) and the principals that
// have a value first (the tokens file's).
void SetRouterTenantLabels(int max, const std::vector<std::string>& principals);
// farcall_router_draining.
void SetRouterDraining(bool draining);

}  // namespace farcall::router

#endif  // FARCALL_SERVER_CALL_RECORD_H_
