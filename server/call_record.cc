#include "server/call_record.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/log.h"
#include "core/metrics.h"
#include "core/refusal_audit.h"
#include "core/tenant_labels.h"

namespace farcall::router {
namespace {

// The router's call metrics, declared once here where they are counted.
struct RouterMetrics {
  metrics::CounterFamily calls{"farcall_router_calls_total",
                               "Calls finished by the router, by handler, status code and tenant.",
                               {"platform", "handler", "code", "tenant"}};
  metrics::HistogramFamily latency{"farcall_router_call_seconds",
                                   "Whole-call latency as the router sees it.",
                                   {"platform", "handler", "tenant"}};
  metrics::CounterFamily retries{"farcall_router_retries_total",
                                 "Calls retried on another agent because the first "
                                 "could not be reached.",
                                 {"platform"}};
  metrics::CounterFamily received{"farcall_router_received_bytes_total",
                                  "Bytes of call messages received from callers and passed "
                                  "on to agents.",
                                  {"platform", "tenant"}};
  metrics::CounterFamily sent{"farcall_router_sent_bytes_total",
                              "Bytes of answer messages passed from agents to callers.",
                              {"platform", "tenant"}};
  metrics::CounterFamily refused{
      "farcall_router_refused_calls_total",
      "Calls refused before reaching an agent: limit (a header or size limit), auth (no, "
      "unknown or insufficient token), platform (not a supported backend), invalid (a "
      "malformed or missing header, a call that fails validation), no_agent (no live agent "
      "serves the platform and handler), draining (the router is shutting down).",
      {"reason", "tenant"}};
  metrics::CounterFamily resolves{
      "farcall_router_resolves_total",
      "Resolve answers (clients that then call an agent directly), by status code; the "
      "platform and handler of refused ones are \"-\".",
      {"platform", "handler", "code"}};
  metrics::GaugeFamily draining{
      "farcall_router_draining", "1 while the router drains for shutdown, else 0.", {}};

  // Every series without per-call labels, at zero from start-up.
  void ExportAtStart() {
    for (const char* r : {"limit", "auth", "platform", "invalid", "no_agent", "draining"}) {
      refused.With({r, kNoTenantLabel});
    }
    for (const char* p : {"cpu", "cuda", "rocm", "oneapi"}) {
      received.With({p, kNoTenantLabel});
      sent.With({p, kNoTenantLabel});
      retries.With({p});
    }
    draining.With({}).Set(0);
  }
};

RouterMetrics& Metrics() {
  static auto* m = new RouterMetrics;
  return *m;
}

TenantLabels& Tenants() {
  static auto* t = new TenantLabels(64);
  return *t;
}

}  // namespace

void CountResolve(absl::string_view platform, absl::string_view handler, absl::StatusCode code) {
  Metrics()
      .resolves.With({std::string(platform), std::string(handler), absl::StatusCodeToString(code)})
      .Increment();
}

void CallRecord::Identify(absl::string_view call_id, absl::string_view principal) {
  call_id_ = log::PrintableCallId(call_id);
  principal_ = std::string(principal);
  tenant_ = Tenants().Of(principal_);
}

void CallRecord::Routed(Platform p, const std::string& handler) {
  platform_ = std::string(PlatformName(p));
  handler_ = handler;  // the pool found it registered: bounded label set
}

void CallRecord::Refused(const char* reason) {
  Metrics().refused.With({reason, tenant_}).Increment();
  refused_ = reason;
}

void CallRecord::Attempt(std::shared_ptr<AgentHandle> agent) {
  absl::MutexLock l(&mu_);
  agent_ = std::move(agent);
}

void CallRecord::Retried() { Metrics().retries.With({platform_}).Increment(); }

void CallRecord::Received(size_t bytes) {
  Metrics().received.With({platform_, tenant_}).Increment(static_cast<double>(bytes));
}

void CallRecord::Sent(size_t bytes) {
  Metrics().sent.With({platform_, tenant_}).Increment(static_cast<double>(bytes));
}

void CallRecord::Finished(const grpc::Status& s) {
  const std::string code = absl::StatusCodeToString(static_cast<absl::StatusCode>(s.error_code()));
  Metrics().calls.With({platform_, handler_, code, tenant_}).Increment();
  Metrics()
      .latency.With({platform_, handler_, tenant_})
      .Observe(absl::ToDoubleSeconds(absl::Now() - start_));
  std::shared_ptr<AgentHandle> agent;
  {
    absl::MutexLock l(&mu_);
    agent = agent_;
  }
  if (!s.ok() && agent != nullptr) {
    agent->RecordError(absl::StrCat(code, ": ", s.error_message()));
  }
  if (!s.ok() || log::DebugEnabled()) {
    // Every refusal (a token, a limit, a platform, an invalid call, no
    // agent) is an audit line, aggregated per peer, caller and reason
    // (core/refusal_audit.h): anyone who can reach the port could fill the
    // log with them, and an outage would give a line per call. Calls refused
    // while draining are counted, and logged at debug only: clients send
    // them again elsewhere.
    const std::string_view reason = refused_;
    if (!s.ok() && !reason.empty() && reason != "draining") {
      const std::string handler = handler_ == "-" ? "" : handler_;
      RefusalAudit::Get().Note({peer_, principal_, refused_, handler, code, s.error_message()});
    } else {
      if (call_id_.empty()) call_id_ = log::PrintableCallId("");
      const std::string line = absl::StrCat(
          "call ", call_id_, " ", handler_, " on ", platform_, " from ",
          peer_.empty() ? "-" : peer_,
          agent != nullptr ? absl::StrCat(" via ", agent->address) : "", ": ", code,
          s.ok() ? absl::StrCat(" in ", absl::FormatDuration(absl::Now() - start_))
                 : absl::StrCat(": ", absl::string_view(s.error_message()).substr(0, 512)));
      const bool quiet = s.ok() || reason == "draining";
      log::Write(quiet ? log::Level::kDebug : log::Level::kWarning, line,
                 {call_id_, handler_ == "-" ? "" : handler_, principal_, peer_, code});
    }
  }
}

void ExportRouterSeries() { Metrics().ExportAtStart(); }

void SetRouterTenantLabels(int max, const std::vector<std::string>& principals) {
  Tenants().set_max(static_cast<size_t>(std::max(max, 0)));
  Tenants().Seed(principals);
}

void SetRouterDraining(bool draining) { Metrics().draining.With({}).Set(draining ? 1 : 0); }

}  // namespace farcall::router
