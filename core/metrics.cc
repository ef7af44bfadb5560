#include "core/metrics.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/http_server.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"

namespace farcall::metrics {
namespace {

std::shared_ptr<prometheus::Registry> GlobalRegistry() {
  static auto* r =
      new std::shared_ptr<prometheus::Registry>(std::make_shared<prometheus::Registry>());
  return *r;
}

std::map<std::string, std::string> Labels(const std::vector<std::string>& names,
                                          const std::vector<std::string>& values) {
  std::map<std::string, std::string> m;
  for (size_t i = 0; i < names.size() && i < values.size(); ++i) m[names[i]] = values[i];
  return m;
}

std::vector<double> LatencyBuckets() {
  return {50e-6,  100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3,
          100e-3, 250e-3, 500e-3, 1,      2.5,  5,      10,   30,    60};
}

// /metrics and the pages given, by exact path, on the hardened HTTP server
// (core/http_server.h): slow or hostile clients hold no thread.
class HttpMetricsServer final : public MetricsServer {
 public:
  explicit HttpMetricsServer(std::unique_ptr<HttpServer> server) : server_(std::move(server)) {}
  int port() const override { return server_->port(); }

 private:
  std::unique_ptr<HttpServer> server_;
};

HttpResponse Serve(const std::map<std::string, PageSource>& pages, absl::string_view path) {
  if (path == "/metrics") {
    return {200, "text/plain; version=0.0.4; charset=utf-8", RenderText()};
  }
  if (auto it = pages.find(std::string(path)); it != pages.end()) {
    Page page = it->second();
    return {200, std::move(page.content_type), std::move(page.body)};
  }
  return {404, "text/plain; charset=utf-8", absl::StrCat("no page ", path, "\n")};
}

}  // namespace

void Counter::Increment(double v) { c_->Increment(v); }
void Gauge::Set(double v) { g_->Set(v); }
void Gauge::Increment(double v) { g_->Increment(v); }
void Gauge::Decrement(double v) { g_->Decrement(v); }
void Histogram::Observe(double v) { h_->Observe(v); }

CounterFamily::CounterFamily(const std::string& name, const std::string& help,
                             std::vector<std::string> labels)
    : family_(&prometheus::BuildCounter().Name(name).Help(help).Register(*GlobalRegistry())),
      labels_(std::move(labels)) {}

Counter CounterFamily::With(const std::vector<std::string>& values) {
  return Counter(&family_->Add(Labels(labels_, values)));
}

GaugeFamily::GaugeFamily(const std::string& name, const std::string& help,
                         std::vector<std::string> labels)
    : family_(&prometheus::BuildGauge().Name(name).Help(help).Register(*GlobalRegistry())),
      labels_(std::move(labels)) {}

Gauge GaugeFamily::With(const std::vector<std::string>& values) {
  return Gauge(&family_->Add(Labels(labels_, values)));
}

void GaugeFamily::Remove(const std::vector<std::string>& values) {
  family_->Remove(&family_->Add(Labels(labels_, values)));
}

HistogramFamily::HistogramFamily(const std::string& name, const std::string& help,
                                 std::vector<std::string> labels, std::vector<double> buckets)
    : family_(&prometheus::BuildHistogram().Name(name).Help(help).Register(*GlobalRegistry())),
      labels_(std::move(labels)),
      buckets_(buckets.empty() ? LatencyBuckets() : std::move(buckets)) {}

Histogram HistogramFamily::With(const std::vector<std::string>& values) {
  return Histogram(
      &family_->Add(Labels(labels_, values), prometheus::Histogram::BucketBoundaries(buckets_)));
}

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const std::string& given, std::map<std::string, PageSource> pages, HttpServer::Access access) {
  // A bare port ("9100" or ":9100") is loopback's: exposing metrics to the
  // network takes an explicit host (0.0.0.0:9100).
  std::string listen = given;
  if (listen.find(':') == std::string::npos) listen = "127.0.0.1:" + listen;
  if (listen.front() == ':') listen = "127.0.0.1" + listen;
  auto server = HttpServer::Start(
      listen, [pages = std::move(pages)](absl::string_view path) { return Serve(pages, path); },
      HttpServer::Limits(), std::move(access));
  if (!server.ok()) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on ", listen, ": ", server.status().message()));
  }
  return std::unique_ptr<MetricsServer>(new HttpMetricsServer(*std::move(server)));
}

namespace {

struct ScrapeHooks {
  absl::Mutex mu;
  int next_id ABSL_GUARDED_BY(mu) = 1;
  std::map<int, std::function<void()>> hooks ABSL_GUARDED_BY(mu);
};

ScrapeHooks& Hooks() {
  static auto* h = new ScrapeHooks;
  return *h;
}

}  // namespace

int AddScrapeHook(std::function<void()> hook) {
  ScrapeHooks& h = Hooks();
  absl::MutexLock l(&h.mu);
  h.hooks[h.next_id] = std::move(hook);
  return h.next_id++;
}

void RemoveScrapeHook(int id) {
  ScrapeHooks& h = Hooks();
  absl::MutexLock l(&h.mu);
  h.hooks.erase(id);
}

namespace {

// The process's CPU seconds, resident bytes and start time from
// /proc/self/stat (and the boot time from /proc/stat); false when
// unreadable.
struct ProcessSample {
  double cpu_seconds = 0;
  double resident_bytes = 0;
  double start_time_seconds = 0;
};

bool SampleProcess(ProcessSample& out) {
  std::ifstream stat_file("/proc/self/stat");
  std::string stat((std::istreambuf_iterator<char>(stat_file)), std::istreambuf_iterator<char>());
  const size_t paren = stat.rfind(')');  // the command name may hold anything
  if (paren == std::string::npos) return false;
  std::istringstream fields(stat.substr(paren + 2));
  std::vector<std::string> f{std::istream_iterator<std::string>(fields),
                             std::istream_iterator<std::string>()};
  // f[0] is field 3 (state): utime 14, stime 15, starttime 22, rss 24.
  if (f.size() < 22) return false;
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  double boot = 0;
  std::ifstream proc_stat("/proc/stat");
  for (std::string line; std::getline(proc_stat, line);) {
    if (line.rfind("btime ", 0) == 0) boot = std::strtod(line.c_str() + 6, nullptr);
  }
  out.cpu_seconds =
      (std::strtod(f[11].c_str(), nullptr) + std::strtod(f[12].c_str(), nullptr)) / ticks;
  out.start_time_seconds = boot + std::strtod(f[19].c_str(), nullptr) / ticks;
  out.resident_bytes = std::strtod(f[21].c_str(), nullptr) * page;
  return true;
}

// process_cpu_seconds_total, process_resident_memory_bytes and
// process_start_time_seconds, as Prometheus's client libraries name them,
// read at each scrape.
void ExportProcessMetrics() {
  static auto* cpu = new CounterFamily("process_cpu_seconds_total",
                                       "Total user and system CPU time spent in seconds.", {});
  static auto* rss =
      new GaugeFamily("process_resident_memory_bytes", "Resident memory size in bytes.", {});
  static auto* start = new GaugeFamily(
      "process_start_time_seconds", "Start time of the process since unix epoch in seconds.", {});
  static auto* counted = new std::atomic<double>(0);  // cpu seconds exported so far
  auto sample = [] {
    ProcessSample p;
    if (!SampleProcess(p)) return;
    const double before = counted->exchange(p.cpu_seconds);
    if (p.cpu_seconds > before) cpu->With({}).Increment(p.cpu_seconds - before);
    rss->With({}).Set(p.resident_bytes);
    start->With({}).Set(p.start_time_seconds);
  };
  sample();
  AddScrapeHook(sample);
}

}  // namespace

void ExportBuildInfo(const std::string& binary, const std::string& version) {
  static auto* info =
      new GaugeFamily("farcall_build_info", "1, labelled with the binary and its farcall version.",
                      {"binary", "version"});
  info->With({binary, version}).Set(1);
  static const bool process_exported = (ExportProcessMetrics(), true);
  (void)process_exported;
}

std::string RenderText() {
  {
    // Under the lock, so that a hook is never running once removed.
    ScrapeHooks& h = Hooks();
    absl::MutexLock l(&h.mu);
    for (auto& [id, hook] : h.hooks) hook();
  }
  prometheus::TextSerializer s;
  return s.Serialize(GlobalRegistry()->Collect());
}

}  // namespace farcall::metrics
