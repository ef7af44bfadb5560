#include "core/metrics.h"

#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "prometheus/counter.h"
#include "prometheus/exposer.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"

namespace farcall::metrics {
namespace {

std::shared_ptr<prometheus::Registry> GlobalRegistry() {
  static auto* r = new std::shared_ptr<prometheus::Registry>(
      std::make_shared<prometheus::Registry>());
  return *r;
}

std::map<std::string, std::string> Labels(const std::vector<std::string>& names,
                                          const std::vector<std::string>& values) {
  std::map<std::string, std::string> m;
  for (size_t i = 0; i < names.size() && i < values.size(); ++i) m[names[i]] = values[i];
  return m;
}

std::vector<double> LatencyBuckets() {
  return {50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3,
          50e-3, 100e-3, 250e-3, 500e-3, 1,     2.5,    5,    10,   30,  60};
}

class ExposerServer final : public MetricsServer {
 public:
  explicit ExposerServer(std::unique_ptr<prometheus::Exposer> e) : e_(std::move(e)) {
    e_->RegisterCollectable(GlobalRegistry());
  }
  int port() const override {
    std::vector<int> ports = e_->GetListeningPorts();
    return ports.empty() ? 0 : ports[0];
  }

 private:
  std::unique_ptr<prometheus::Exposer> e_;
};

}  // namespace

void Counter::Increment(double v) { c_->Increment(v); }
void Gauge::Set(double v) { g_->Set(v); }
void Gauge::Increment(double v) { g_->Increment(v); }
void Gauge::Decrement(double v) { g_->Decrement(v); }
void Histogram::Observe(double v) { h_->Observe(v); }

CounterFamily::CounterFamily(const std::string& name, const std::string& help,
                             std::vector<std::string> labels)
    : family_(&prometheus::BuildCounter().Name(name).Help(help).Register(
          *GlobalRegistry())),
      labels_(std::move(labels)) {}

Counter CounterFamily::With(const std::vector<std::string>& values) {
  return Counter(&family_->Add(Labels(labels_, values)));
}

GaugeFamily::GaugeFamily(const std::string& name, const std::string& help,
                         std::vector<std::string> labels)
    : family_(&prometheus::BuildGauge().Name(name).Help(help).Register(
          *GlobalRegistry())),
      labels_(std::move(labels)) {}

Gauge GaugeFamily::With(const std::vector<std::string>& values) {
  return Gauge(&family_->Add(Labels(labels_, values)));
}

HistogramFamily::HistogramFamily(const std::string& name, const std::string& help,
                                 std::vector<std::string> labels,
                                 std::vector<double> buckets)
    : family_(&prometheus::BuildHistogram().Name(name).Help(help).Register(
          *GlobalRegistry())),
      labels_(std::move(labels)),
      buckets_(buckets.empty() ? LatencyBuckets() : std::move(buckets)) {}

Histogram HistogramFamily::With(const std::vector<std::string>& values) {
  return Histogram(&family_->Add(Labels(labels_, values),
                                 prometheus::Histogram::BucketBoundaries(buckets_)));
}

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const std::string& given) {
  // A bare port ("9100" or ":9100") is loopback's: exposing metrics to the
  // network takes an explicit host (0.0.0.0:9100).
  std::string listen = given;
  if (listen.find(':') == std::string::npos) listen = "127.0.0.1:" + listen;
  if (listen.front() == ':') listen = "127.0.0.1" + listen;
  try {
    // prometheus-cpp reports a bind failure by throwing; keep it inside.
    auto e = std::make_unique<prometheus::Exposer>(listen);
    return std::unique_ptr<MetricsServer>(new ExposerServer(std::move(e)));
  } catch (const std::exception& ex) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on ", listen, ": ", ex.what()));
  }
}

std::string RenderText() {
  prometheus::TextSerializer s;
  return s.Serialize(GlobalRegistry()->Collect());
}

}  // namespace farcall::metrics
