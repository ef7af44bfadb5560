#include "server/status_page.h"

#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace farcall::router {
namespace {

// A JSON string literal: quotes, backslashes and control characters
// escaped; bytes of agents' own texts (handler names, errors) pass as they
// are otherwise.
std::string Quote(absl::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string Number(double v) {
  if (!std::isfinite(v)) return "0";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3f", v);
  return buf;
}

}  // namespace

std::string StatusJson(const RouterStatus& router, const std::vector<AgentStatus>& agents,
                       absl::Time now) {
  std::vector<std::string> rows;
  for (const AgentStatus& a : agents) {
    std::vector<std::string> handlers;
    for (const std::string& h : a.handlers) handlers.push_back(Quote(h));
    const bool has_error = !a.last_call_error.empty();
    rows.push_back(absl::StrCat(
        "{\"address\":", Quote(a.address), ",\"agent_id\":", Quote(a.agent_id),
        ",\"platform\":", Quote(a.platform), ",\"health\":", Quote(a.health),
        ",\"probe_error\":", Quote(a.probe_error), ",\"inflight\":", a.inflight,
        ",\"calls_total\":", a.calls_total, ",\"errors_total\":", a.errors_total,
        ",\"call_rate\":", Number(a.call_rate), ",\"error_rate\":", Number(a.error_rate),
        ",\"last_call_error\":", has_error ? Quote(a.last_call_error) : "null",
        ",\"last_call_error_age_seconds\":",
        has_error ? Number(absl::ToDoubleSeconds(now - a.last_call_error_time)) : "null",
        ",\"handlers\":[", absl::StrJoin(handlers, ","), "]}"));
  }
  return absl::StrCat("{\"router\":{\"version\":", Quote(router.version),
                      ",\"uptime_seconds\":", Number(absl::ToDoubleSeconds(now - router.started)),
                      ",\"draining\":", router.draining ? "true" : "false", "},\"agents\":[",
                      absl::StrJoin(rows, ","), "]}\n");
}

const std::string& StatusHtml() {
  static const auto* page = new std::string(R"HTML(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>farcall router</title>
<style>
  body { font: 14px system-ui, sans-serif; margin: 1.5em; color: #1d232a; }
  h1 { font-size: 1.3em; margin: 0 0 .2em; }
  #router { color: #555; margin-bottom: 1em; }
  table { border-collapse: collapse; width: 100%; }
  th, td { text-align: left; padding: .35em .6em; border-bottom: 1px solid #ddd;
           vertical-align: top; }
  th { background: #f3f5f7; font-weight: 600; }
  td.num { text-align: right; font-variant-numeric: tabular-nums; }
  .SERVING { color: #0a7a2f; font-weight: 600; }
  .NOT_SERVING, .DOWN { color: #b3261e; font-weight: 600; }
  .UNKNOWN { color: #8a6d00; font-weight: 600; }
  .error { color: #b3261e; max-width: 32em; overflow-wrap: anywhere; }
  #stale { color: #b3261e; display: none; }
</style>
</head>
<body>
<h1>farcall router</h1>
<div id="router">loading&hellip;</div>
<div id="stale">The router does not answer; the table shows its last known state.</div>
<table>
  <thead><tr><th>agent</th><th>address</th><th>platform</th><th>health</th>
    <th>in flight</th><th>calls/s</th><th>errors/s</th><th>calls</th><th>errors</th>
    <th>last error</th><th>handlers</th></tr></thead>
  <tbody id="agents"></tbody>
</table>
<script>
"use strict";
function cell(row, text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  row.appendChild(td);
}
function render(s) {
  document.getElementById("router").textContent =
    "version " + s.router.version + " \u00b7 up " + Math.round(s.router.uptime_seconds) +
    " s" + (s.router.draining ? " \u00b7 draining" : "") + " \u00b7 " + s.agents.length +
    " agent(s), " + s.agents.filter(a => a.health === "SERVING").length + " serving";
  const body = document.getElementById("agents");
  body.replaceChildren();
  for (const a of s.agents) {
    const row = document.createElement("tr");
    row.dataset.agent = a.address;
    row.dataset.health = a.health;
    cell(row, a.agent_id || "\u2014");
    cell(row, a.address);
    cell(row, a.platform || "\u2014");
    cell(row, a.health + (a.probe_error ? " (" + a.probe_error + ")" : ""), a.health);
    cell(row, a.inflight, "num");
    cell(row, a.call_rate.toFixed(2), "num");
    cell(row, a.error_rate.toFixed(2), "num");
    cell(row, a.calls_total, "num");
    cell(row, a.errors_total, "num");
    cell(row, a.last_call_error === null ? "" :
         a.last_call_error + " (" + Math.round(a.last_call_error_age_seconds) + " s ago)",
         "error");
    cell(row, a.handlers.join(", "));
    body.appendChild(row);
  }
}
async function refresh() {
  try {
    const r = await fetch("/status.json", {cache: "no-store"});
    if (!r.ok) throw new Error(r.status);
    render(await r.json());
    document.getElementById("stale").style.display = "none";
    document.body.dataset.loaded = "true";
  } catch (e) {
    document.getElementById("stale").style.display = "block";
  }
}
refresh();
setInterval(refresh, 1000);
</script>
</body>
</html>
)HTML");
  return *page;
}

}  // namespace farcall::router
