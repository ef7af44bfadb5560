#include "device_agents/agent_metrics.h"

#include "core/tenant_labels.h"

namespace farcall::agent {

AgentMetrics& Metrics() {
  static auto* m = new AgentMetrics;
  return *m;
}

void ExportAgentSeries() {
  AgentMetrics& m = Metrics();
  m.inflight_calls.With({});
  m.inflight_bytes.With({});
  m.budget.With({});
  for (const char* reason : {"limit", "auth", "invalid", "draining"}) {
    m.refused.With({reason, kNoTenantLabel});
  }
  m.draining.With({});
  for (const char* result : {"verified", "cached", "unknown_key", "bad_signature", "expired",
                             "too_long", "malformed", "no_principal"}) {
    m.capability_checks.With({result});
  }
  m.graph_hits.With({});
  m.graph_misses.With({});
  m.graph_evictions.With({});
  m.graph_bytes.With({});
  m.staging_fallbacks.With({});
  m.shm_regions.With({});
  m.shm_mapped_bytes.With({});
  m.resident_bytes.With({});
  m.residents.With({});
  m.residents_expired.With({});
  m.resident_calls_while_draining.With({});
}

}  // namespace farcall::agent
