// The agent's metrics, declared once here with their help text and counted
// where the work happens (calls, the budget, shared memory, the GPU graph
// cache, staging). Every series without per-call labels is exported from
// start-up, at zero, so that dashboards and alerts find it on every agent.
// Per-call series carry the caller's `tenant` (core/tenant_labels.h: a
// bounded set, `-` for calls without a principal, `other` past
// --metrics_max_tenants).
//
// Thread safety: thread-safe, as metrics:: is.
#ifndef FARCALL_DEVICE_AGENTS_AGENT_METRICS_H_
#define FARCALL_DEVICE_AGENTS_AGENT_METRICS_H_

#include "core/metrics.h"

namespace farcall::agent {

struct AgentMetrics {
  metrics::CounterFamily calls{"farcall_agent_calls_total",
                               "Calls finished by this agent, by handler, status code and tenant.",
                               {"platform", "handler", "code", "tenant"}};
  metrics::HistogramFamily queue{"farcall_agent_queue_seconds",
                                 "Time from the inputs' arrival until a worker ran the handler.",
                                 {"platform", "handler", "tenant"}};
  metrics::HistogramFamily admission{
      "farcall_agent_admission_seconds",
      "Time from the call header until the call's bytes were admitted to the in-flight budget "
      "(its wait for memory, behind other calls).",
      {"platform", "tenant"}};
  metrics::HistogramFamily transfer{"farcall_agent_transfer_seconds",
                                    "Time from the call header until the last input byte.",
                                    {"platform", "handler", "tenant"}};
  metrics::HistogramFamily execute{"farcall_agent_execute_seconds",
                                   "Time the handler ran, device synchronisation included.",
                                   {"platform", "handler", "tenant"}};
  // The one series an SLO reads: a sum of the stages' percentiles is not
  // the percentile of the whole.
  metrics::HistogramFamily call{"farcall_agent_call_seconds",
                                "Whole calls that ended OK, from the header's arrival to the "
                                "answer's end.",
                                {"platform", "handler", "tenant"}};
  metrics::CounterFamily received{"farcall_agent_received_bytes_total",
                                  "Tensor bytes received in calls.",
                                  {"platform", "tenant"}};
  metrics::CounterFamily sent{"farcall_agent_sent_bytes_total",
                              "Tensor bytes sent back in results.",
                              {"platform", "tenant"}};
  metrics::GaugeFamily inflight_calls{
      "farcall_agent_inflight_calls", "Calls this agent holds now.", {}};
  metrics::GaugeFamily inflight_bytes{
      "farcall_agent_inflight_bytes",
      "Bytes admitted for the calls held now (tensors and per-call overhead).",
      {}};
  metrics::GaugeFamily budget{
      "farcall_agent_budget_bytes", "The in-flight byte budget (--max_inflight_bytes).", {}};
  metrics::CounterFamily refused{
      "farcall_agent_refused_calls_total",
      "Calls refused before they ran: limit (a header, size or budget limit), auth (no, "
      "unknown or insufficient token; a refused Describe counts here too), invalid (a malformed "
      "header, an unknown handler, a call "
      "that fails validation), draining (the agent is shutting down).",
      {"reason", "tenant"}};
  metrics::CounterFamily capability_checks{
      "farcall_agent_capability_checks_total",
      "Capabilities calls presented, by result: verified (its signature checked now), cached "
      "(verified before; the signature is not checked again), or why it was refused: "
      "unknown_key (signed with a key this agent does not trust), bad_signature, expired, "
      "too_long, malformed, no_principal (it names no caller, and this agent requires tokens).",
      {"result"}};
  metrics::GaugeFamily draining{
      "farcall_agent_draining", "1 while the agent drains for shutdown, else 0.", {}};
  metrics::GaugeFamily device_used{
      "farcall_agent_device_memory_used_bytes",
      "Device memory the agent holds: tensors of calls in flight and cached blocks.",
      {"device"}};
  metrics::GaugeFamily device_total{
      "farcall_agent_device_memory_total_bytes", "Device memory in all.", {"device"}};
  metrics::CounterFamily graph_hits{
      "farcall_agent_graph_cache_hits_total",
      "Calls of command-buffer-compatible handlers replayed from a captured graph.",
      {}};
  metrics::CounterFamily graph_misses{
      "farcall_agent_graph_cache_misses_total",
      "Calls of command-buffer-compatible handlers that captured a new graph.",
      {}};
  metrics::CounterFamily graph_evictions{
      "farcall_agent_graph_cache_evictions_total",
      "Graphs dropped to keep the cache within --graph_cache_bytes.",
      {}};
  metrics::GaugeFamily graph_bytes{
      "farcall_agent_graph_cache_bytes", "Device memory held by cached graphs.", {}};
  metrics::CounterFamily staging_fallbacks{
      "farcall_agent_staging_fallbacks_total",
      "Staging blocks taken from plain host memory because the pinned pool was all in use, "
      "and shared-memory regions a device could not pin (copied from pageable memory).",
      {}};
  metrics::GaugeFamily shm_regions{
      "farcall_agent_shm_regions", "Shared-memory regions clients have registered now.", {}};
  metrics::GaugeFamily shm_mapped_bytes{
      "farcall_agent_shm_mapped_bytes", "Bytes of those regions the agent has mapped.", {}};
  metrics::GaugeFamily resident_bytes{
      "farcall_agent_resident_bytes",
      "Bytes of the resident arrays this agent holds for clients (in its budget).",
      {}};
  metrics::GaugeFamily residents{
      "farcall_agent_residents", "Resident arrays this agent holds for clients.", {}};
  metrics::CounterFamily residents_expired{
      "farcall_agent_residents_expired_total",
      "Resident arrays freed because their TTL ran out since their last use.",
      {}};
  metrics::CounterFamily resident_calls_while_draining{
      "farcall_agent_resident_calls_while_draining_total",
      "Calls naming resident arrays this agent took while it drained (others are refused).",
      {}};
};

AgentMetrics& Metrics();

// Creates the series that have no per-call labels, at zero, so that they
// are there before the first call.
void ExportAgentSeries();

}  // namespace farcall::agent

#endif  // FARCALL_DEVICE_AGENTS_AGENT_METRICS_H_
