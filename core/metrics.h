// The metrics registry: the only code that touches prometheus-cpp. Each
// process declares its metric families next to the code that counts them,
// with their help text, and serves them all on --metrics_listen.
//
//   static auto& calls = *new metrics::CounterFamily(
//       "farcall_agent_calls_total", "Calls finished, by handler and code.",
//       {"platform", "handler", "code"});
//   calls.With({"cpu", "axpy", "OK"}).Increment();
//
// Thread safety: everything here may be used from any thread. Families and
// their children live for the life of the process.
#ifndef FARCALL_CORE_METRICS_H_
#define FARCALL_CORE_METRICS_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/http_server.h"

namespace prometheus {
class Counter;
class Gauge;
class Histogram;
template <typename T>
class Family;
}  // namespace prometheus

namespace farcall::metrics {

class Counter {
 public:
  void Increment(double v = 1);

 private:
  friend class CounterFamily;
  explicit Counter(prometheus::Counter* c) : c_(c) {}
  prometheus::Counter* c_;
};

class Gauge {
 public:
  void Set(double v);
  void Increment(double v = 1);
  void Decrement(double v = 1);

 private:
  friend class GaugeFamily;
  explicit Gauge(prometheus::Gauge* g) : g_(g) {}
  prometheus::Gauge* g_;
};

class Histogram {
 public:
  void Observe(double v);

 private:
  friend class HistogramFamily;
  explicit Histogram(prometheus::Histogram* h) : h_(h) {}
  prometheus::Histogram* h_;
};

// A named family with fixed label names; With() gets the child for one set of
// label values (created on first use). Names follow Prometheus conventions:
// farcall_..._total, _seconds, _bytes.
class CounterFamily {
 public:
  CounterFamily(const std::string& name, const std::string& help, std::vector<std::string> labels);
  Counter With(const std::vector<std::string>& values);

 private:
  prometheus::Family<prometheus::Counter>* family_;
  std::vector<std::string> labels_;
};

class GaugeFamily {
 public:
  GaugeFamily(const std::string& name, const std::string& help, std::vector<std::string> labels);
  Gauge With(const std::vector<std::string>& values);
  // Stops exporting the child for these label values (one that went away,
  // such as an agent no longer resolved).
  void Remove(const std::vector<std::string>& values);

 private:
  prometheus::Family<prometheus::Gauge>* family_;
  std::vector<std::string> labels_;
};

class HistogramFamily {
 public:
  // `buckets`: upper bounds; empty: latency buckets from 50 us to 60 s.
  HistogramFamily(const std::string& name, const std::string& help, std::vector<std::string> labels,
                  std::vector<double> buckets = {});
  Histogram With(const std::vector<std::string>& values);

 private:
  prometheus::Family<prometheus::Histogram>* family_;
  std::vector<std::string> labels_;
  std::vector<double> buckets_;
};

// A page served besides /metrics (the router's status page): its content
// type and body, made afresh for each request, on a server thread.
struct Page {
  std::string content_type;
  std::string body;
};
using PageSource = std::function<Page()>;

// Serves every family at http://LISTEN/metrics, and `pages` at their paths
// (exact paths, such as "/" and "/status.json"), until the returned handle
// is destroyed. Other paths get 404. UNAVAILABLE if it cannot bind.
class MetricsServer {
 public:
  // `listen` is HOST:PORT, or a bare PORT (or :PORT), which binds loopback
  // only. Port 0 picks a free one.
  // `access`: TLS and who may read (by default plain HTTP, open).
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(
      const std::string& listen, std::map<std::string, PageSource> pages = {},
      HttpServer::Access access = {});
  virtual ~MetricsServer() = default;
  virtual int port() const = 0;
};

// The text exposition of every family, as /metrics serves it, after the
// scrape hooks ran.
std::string RenderText();

// Runs `hook` before each scrape, to set gauges that are read, not counted
// (device memory in use). Returns an id for RemoveScrapeHook, which waits
// for a running hook to finish.
int AddScrapeHook(std::function<void()> hook);
void RemoveScrapeHook(int id);

// farcall_build_info{binary, version} = 1; and, once per process,
// process_cpu_seconds_total, process_resident_memory_bytes and
// process_start_time_seconds (from /proc, at each scrape).
void ExportBuildInfo(const std::string& binary, const std::string& version);

}  // namespace farcall::metrics

#endif  // FARCALL_CORE_METRICS_H_
