// The router's status page, served with /metrics on --metrics_listen:
//   /             an HTML page that shows every agent (platform, health,
//                 calls in flight, call and error rates, the last error) and
//                 refreshes itself from /status.json every second;
//   /status.json  the same as JSON, for scripts:
//     {"router": {"version", "uptime_seconds", "draining"},
//      "agents": [{"address", "agent_id", "platform", "health",
//                  "probe_error", "inflight", "calls_total", "errors_total",
//                  "call_rate", "error_rate", "last_call_error",
//                  "last_call_error_age_seconds", "handlers"}]}
//     Rates are per second over the last minute; last_call_error is null
//     until a call routed to the agent fails.
#ifndef FARCALL_SERVER_STATUS_PAGE_H_
#define FARCALL_SERVER_STATUS_PAGE_H_

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "server/agent_pool.h"

namespace farcall::router {

struct RouterStatus {
  std::string version;
  absl::Time started;
  bool draining = false;
};

std::string StatusJson(const RouterStatus& router, const std::vector<AgentStatus>& agents,
                       absl::Time now);

// The page itself: static, it reads /status.json.
const std::string& StatusHtml();

}  // namespace farcall::router

#endif  // FARCALL_SERVER_STATUS_PAGE_H_
