#include "server/agent_pool.h"

#include <algorithm>
#include <atomic>
#include <functional>
#include <utility>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "core/call_validation.h"
#include "core/log.h"
#include "core/metrics.h"
#include "core/tokens.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "server/agent_discovery.h"

namespace farcall::router {
namespace {

// Agent state as the router sees it, declared once here where it is set.
struct PoolMetrics {
  metrics::GaugeFamily up{"farcall_router_agent_up",
                          "1 when the router considers the agent live (SERVING), else 0.",
                          {"agent", "platform"}};
  metrics::GaugeFamily inflight{"farcall_router_agent_inflight_calls",
                                "Calls the router has in flight on the agent.",
                                {"agent"}};
  // Kept while the router runs, so that a name that resolves to nothing
  // still has a series to alert on (an agent's own series go with it).
  metrics::GaugeFamily source_addresses{
      "farcall_router_agent_source_addresses",
      "Agents an --agents entry named at the router's last look: the addresses a dns:/// name "
      "resolved to (0: none, or the lookup failed), 1 for a plain address.",
      {"source"}};
  metrics::CounterFamily duplicate_ids{
      "farcall_router_duplicate_agent_ids_total",
      "Probes of an agent that reported an agent id another live agent (at another address) "
      "already has: capabilities name agents by id, so the later one is left out until the id "
      "is its own.",
      {}};
};

PoolMetrics& Metrics() {
  static auto* m = new PoolMetrics;
  return *m;
}

// Exports an agent's state; `published` is the platform it was last
// exported under ("" before it described itself), whose series goes.
void Publish(const std::string& address, const v1::AgentInfo& info, v1::AgentEntry::Health health,
             int64_t inflight, std::string& published) {
  if (published != info.platform()) {
    Metrics().up.Remove({address, published});
    published = info.platform();
  }
  Metrics().up.With({address, published}).Set(health == v1::AgentEntry::SERVING ? 1 : 0);
  Metrics().inflight.With({address}).Set(static_cast<double>(inflight));
}

// An agent no longer in the pool is no longer exported: a pod gone in a
// rollout must not look like an agent down for good.
void Unpublish(const std::string& address, const std::string& published) {
  Metrics().up.Remove({address, published});
  Metrics().inflight.Remove({address});
}

}  // namespace

std::shared_ptr<AgentHandle> AgentPool::Connect(const std::string& address) const {
  auto h = std::make_shared<AgentHandle>();
  h->address = address;
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  // Reconnect quickly once an agent comes back.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  if (!options_.tls_server_name.empty()) {
    args.SetSslTargetNameOverride(options_.tls_server_name);
  }
  h->channel = grpc::CreateCustomChannel(
      address,
      options_.credentials != nullptr ? options_.credentials : grpc::InsecureChannelCredentials(),
      args);
  h->generic = std::make_unique<grpc::GenericStub>(h->channel);
  return h;
}

AgentPool::AgentPool(const std::vector<std::string>& sources, Options options)
    : options_(options), sources_(sources) {
  Metrics().duplicate_ids.With({});  // at zero from start-up
  absl::MutexLock l(&mu_);
  for (const std::string& s : sources_) {
    if (!IsMultiAgentSource(s)) {
      entries_.push_back(Entry{Connect(s), s});
      Metrics().source_addresses.With({s}).Set(1);
    }
  }
}

void AgentPool::Resolve() {
  for (const std::string& source : sources_) {
    if (!IsMultiAgentSource(source)) continue;
    absl::StatusOr<std::vector<std::string>> addrs = ExpandAgentSource(source);
    Metrics().source_addresses.With({source}).Set(addrs.ok() ? static_cast<double>(addrs->size())
                                                             : 0);
    absl::MutexLock l(&mu_);
    // Said once when an entry starts to name no agent (a mistyped name, a
    // Service with no ready pods), and once when it names some again.
    if (!addrs.ok() || addrs->empty()) {
      if (empty_sources_.insert(source).second) {
        // A failed lookup keeps the agents known from the entry (below); a
        // lookup that names none drops them.
        const int64_t known = addrs.ok() ? 0 : absl::c_count_if(entries_, [&](const Entry& e) {
          return e.source == source;
        });
        log::Warning(absl::StrCat(
            "--agents entry '", source, "' ",
            addrs.ok() ? "names no agent"
                       : absl::StrCat("cannot be resolved (", addrs.status().message(), ")"),
            known > 0 ? absl::StrCat("; the router keeps calling the ", known,
                                     " agent(s) it knew from it, as their probes allow, until "
                                     "it resolves again.")
                      : "; calls it should serve get UNAVAILABLE until it names an agent."));
      }
    } else if (empty_sources_.erase(source) > 0) {
      log::Info(
          absl::StrCat("--agents entry '", source, "' names ", addrs->size(), " agent(s) again."));
    }
    // A failed lookup keeps the agents already known: a DNS blip must not
    // empty the pool. Their own probes still tell whether they are live.
    if (!addrs.ok()) continue;
    std::erase_if(entries_, [&](const Entry& e) {
      const bool gone = e.source == source &&
                        std::find(addrs->begin(), addrs->end(), e.handle->address) == addrs->end();
      if (gone) Unpublish(e.handle->address, e.published_platform);
      return gone;
    });
    for (const std::string& a : *addrs) {
      bool known = false;
      for (const Entry& e : entries_) known |= (e.source == source && e.handle->address == a);
      if (!known) entries_.push_back(Entry{Connect(a), source});
    }
  }
}

AgentPool::~AgentPool() {
  stop_.Notify();
  if (prober_.joinable()) prober_.join();
  // Probes of a ListAgents(refresh) may still run; each ends by its
  // deadline.
  absl::MutexLock l(&mu_);
  mu_.Await(absl::Condition(
      +[](int* n) { return *n == 0; }, &probes_in_flight_));
}

// One agent's probe: its health, then, when it serves, its Describe (every
// round: the handlers may change with a restart on the same address, and
// the agent's own count of its calls is its load); both asynchronous, so
// that no thread waits on an agent (and a hung one delays nothing). Owns
// what the RPCs need until the last one completes.
struct AgentPool::Probe {
  std::shared_ptr<AgentHandle> handle;
  std::function<void()> done;
  grpc::health::v1::Health::Stub health;
  v1::Agent::Stub agent;
  grpc::ClientContext hctx, dctx;
  grpc::health::v1::HealthCheckRequest hreq;
  grpc::health::v1::HealthCheckResponse hresp;
  grpc::Status hs, ds;
  v1::DescribeRequest dreq;
  v1::AgentInfo info;
  explicit Probe(std::shared_ptr<AgentHandle> h)
      : handle(std::move(h)), health(handle->channel), agent(handle->channel) {}
};

void AgentPool::ProbeOne(const std::shared_ptr<AgentHandle>& h, std::function<void()> done) {
  auto p = std::make_shared<Probe>(h);
  p->done = std::move(done);
  {
    absl::MutexLock l(&mu_);
    ++probes_in_flight_;
  }
  const auto deadline =
      std::chrono::system_clock::now() + absl::ToChronoMilliseconds(options_.probe_timeout);
  p->hctx.set_deadline(deadline);
  // Waiting for the connection lets a probe see an agent that has just come
  // back, instead of failing fast on the channel's last failure.
  p->hctx.set_wait_for_ready(true);
  p->dctx.set_deadline(deadline);
  if (!options_.authorization.empty()) {
    p->dctx.AddMetadata(kAuthorizationKey, options_.authorization);
  }
  p->health.async()->Check(&p->hctx, &p->hreq, &p->hresp, [this, p](grpc::Status s) {
    p->hs = std::move(s);
    if (p->hs.ok() && p->hresp.status() == grpc::health::v1::HealthCheckResponse::SERVING) {
      p->agent.async()->Describe(&p->dctx, &p->dreq, &p->info, [this, p](grpc::Status d) {
        p->ds = std::move(d);
        Record(*p);
      });
      return;
    }
    Record(*p);
  });
}

void AgentPool::Record(Probe& p) {
  {
    absl::MutexLock l(&mu_);
    const std::shared_ptr<AgentHandle>& h = p.handle;
    auto it = std::find_if(entries_.begin(), entries_.end(),
                           [&](const Entry& e) { return e.handle == h; });
    if (it != entries_.end()) {  // else dropped from DNS meanwhile
      Entry& e = *it;
      if (!p.hs.ok()) {
        e.health = v1::AgentEntry::DOWN;
        e.last_error = absl::StrCat("health check failed: ", p.hs.error_message());
      } else if (p.hresp.status() != grpc::health::v1::HealthCheckResponse::SERVING) {
        e.health = v1::AgentEntry::NOT_SERVING;
        e.last_error = "the agent reports NOT_SERVING";
      } else if (!p.ds.ok()) {
        e.health = v1::AgentEntry::DOWN;
        e.last_error = absl::StrCat("Describe failed: ", p.ds.error_message());
      } else if (const Entry* holder = IdHolder(p.info.agent_id(), *h); holder != nullptr) {
        // A capability for the one would work at the other: left out.
        Metrics().duplicate_ids.With({}).Increment();
        e.health = v1::AgentEntry::NOT_SERVING;
        const std::string why =
            absl::StrCat("it reports agent id '", p.info.agent_id(), "', which the agent at ",
                         holder->handle->address,
                         " has already: left out until each agent has its own id "
                         "(--agent_id, or leave it to the default)");
        if (e.last_error != why) log::Warning(absl::StrCat("agent ", h->address, ": ", why));
        e.last_error = why;
      } else {
        e.info = std::move(p.info);
        e.described = true;
        e.described_at = absl::Now();
        h->reported_inflight = e.info.inflight_calls();
        {
          absl::MutexLock l(&h->id_mu);
          h->agent_id = e.info.agent_id();
        }
        e.health = v1::AgentEntry::SERVING;
        e.last_error.clear();
      }
      Publish(h->address, e.info, e.health, h->inflight.load(), e.published_platform);
    }
  }
  if (p.done) p.done();
  absl::MutexLock l(&mu_);
  --probes_in_flight_;
}

const AgentPool::Entry* AgentPool::IdHolder(const std::string& id,
                                            const AgentHandle& asking) const {
  for (const Entry& other : entries_) {
    if (other.handle.get() != &asking && other.health == v1::AgentEntry::SERVING &&
        other.handle->address != asking.address && other.handle->id() == id) {
      return &other;
    }
  }
  return nullptr;
}

void AgentPool::ProbeAllAsync(std::function<void()> done) {
  std::vector<std::shared_ptr<AgentHandle>> handles;
  {
    absl::MutexLock l(&mu_);
    for (const Entry& e : entries_) handles.push_back(e.handle);
  }
  if (handles.empty()) return done();
  // The last probe to finish says so.
  auto left = std::make_shared<std::atomic<size_t>>(handles.size());
  auto all_done = std::make_shared<std::function<void()>>(std::move(done));
  for (const auto& h : handles) {
    ProbeOne(h, [left, all_done] {
      if (left->fetch_sub(1) == 1) (*all_done)();
    });
  }
}

void AgentPool::ProbeAll() {
  Resolve();
  absl::Notification probed;
  ProbeAllAsync([&probed] { probed.Notify(); });
  probed.WaitForNotification();
}

void AgentPool::StartProbing() {
  SampleRates();  // the baseline: rates count calls from here
  prober_ = std::thread([this] {
    while (!stop_.WaitForNotificationWithTimeout(options_.probe_interval)) {
      ProbeAll();
      SampleRates();
    }
  });
}

void AgentHandle::RecordError(absl::string_view error) {
  errors_total.fetch_add(1);
  absl::MutexLock l(&error_mu);
  last_call_error = std::string(error.substr(0, 300));
  last_call_error_time = absl::Now();
}

// An agent's calls and failed calls: as the agent counts them (every call,
// however it came: with lookaside none pass the router) at its last probe,
// or the calls the router forwarded to it, whichever is more (those since
// the probe, a restarted agent's earlier ones).
std::pair<uint64_t, uint64_t> AgentPool::CallCounts(const Entry& e) {
  const uint64_t forwarded = e.handle->calls_total.load(), failed = e.handle->errors_total.load();
  if (!e.described) return {forwarded, failed};
  return {std::max<uint64_t>(e.info.calls_total(), forwarded),
          std::max<uint64_t>(e.info.failed_calls_total(), failed)};
}

void AgentPool::SampleRates() {
  const absl::Time now = absl::Now();
  absl::MutexLock l(&mu_);
  for (Entry& e : entries_) {
    const auto [calls, errors] = CallCounts(e);
    // A restarted agent counts from 0 again: its rates start afresh.
    if (!e.samples.empty() && calls < e.samples.back().calls) e.samples.clear();
    e.samples.push_back({now, calls, errors});
    while (e.samples.size() > 2 && now - e.samples.front().time > absl::Minutes(1)) {
      e.samples.pop_front();
    }
  }
}

std::vector<AgentStatus> AgentPool::Status() const {
  std::vector<AgentStatus> out;
  const absl::Time now = absl::Now();
  absl::MutexLock l(&mu_);
  for (const Entry& e : entries_) {
    AgentStatus a;
    a.address = e.handle->address;
    a.agent_id = e.info.agent_id();
    a.platform = e.info.platform();
    a.health = v1::AgentEntry::Health_Name(e.health);
    a.probe_error = e.last_error;
    a.inflight = e.handle->inflight.load();
    std::tie(a.calls_total, a.errors_total) = CallCounts(e);
    if (!e.samples.empty()) {
      const double seconds = absl::ToDoubleSeconds(now - e.samples.front().time);
      if (seconds > 0.5) {
        a.call_rate = static_cast<double>(a.calls_total - e.samples.front().calls) / seconds;
        a.error_rate = static_cast<double>(a.errors_total - e.samples.front().errors) / seconds;
      }
    }
    {
      absl::MutexLock el(&e.handle->error_mu);
      a.last_call_error = e.handle->last_call_error;
      a.last_call_error_time = e.handle->last_call_error_time;
    }
    // The agent's own last failure, when later than the last one routed
    // here: calls that go to the agent directly (lookaside) fail there.
    if (e.described && !e.info.last_failed_call().empty()) {
      const absl::Time when = e.described_at - absl::Milliseconds(e.info.last_failed_call_age_ms());
      if (a.last_call_error.empty() || when > a.last_call_error_time) {
        a.last_call_error = e.info.last_failed_call();
        a.last_call_error_time = when;
      }
    }
    for (const v1::HandlerInfo& h : e.info.handlers()) a.handlers.push_back(h.name());
    out.push_back(std::move(a));
  }
  return out;
}

std::shared_ptr<AgentHandle> AgentPool::Holder(absl::string_view agent_id) const {
  absl::MutexLock l(&mu_);
  for (const Entry& e : entries_) {
    const bool answers =
        e.health == v1::AgentEntry::SERVING || e.health == v1::AgentEntry::NOT_SERVING;
    if (answers && e.described && e.info.agent_id() == agent_id) return e.handle;
  }
  return nullptr;
}

absl::StatusOr<std::vector<std::shared_ptr<AgentHandle>>> AgentPool::Candidates(
    Platform platform, absl::string_view handler) const {
  const absl::string_view name = PlatformName(platform);
  std::vector<std::shared_ptr<AgentHandle>> out;
  bool any_live = false;
  absl::MutexLock l(&mu_);
  auto live = [&](const Entry& e) {
    return e.health == v1::AgentEntry::SERVING && e.described && e.info.platform() == name;
  };
  for (const Entry& e : entries_) {
    if (!live(e)) continue;
    any_live = true;
    for (const v1::HandlerInfo& h : e.info.handlers()) {
      if (h.name() == handler) {
        out.push_back(e.handle);
        break;
      }
    }
  }
  if (!any_live) return NoLiveAgentError(name);
  if (out.empty()) {
    // Only now, for the error: what the live agents do have.
    std::vector<std::string> registered;
    for (const Entry& e : entries_) {
      if (!live(e)) continue;
      for (const v1::HandlerInfo& h : e.info.handlers()) registered.push_back(h.name());
    }
    return HandlerNotFoundError(handler, name, std::move(registered));
  }
  return out;
}

void AgentPool::MarkDown(const AgentHandle& agent, absl::string_view why) {
  absl::MutexLock l(&mu_);
  for (Entry& e : entries_) {
    if (e.handle.get() == &agent) {
      e.health = v1::AgentEntry::DOWN;
      e.last_error = std::string(why);
      Publish(e.handle->address, e.info, e.health, e.handle->inflight.load(), e.published_platform);
    }
  }
}

v1::ListAgentsResponse AgentPool::List() const {
  v1::ListAgentsResponse r;
  absl::MutexLock l(&mu_);
  for (const Entry& e : entries_) {
    v1::AgentEntry* a = r.add_agents();
    a->set_address(e.handle->address);
    *a->mutable_info() = e.info;
    a->set_health(e.health);
    a->set_inflight_calls(e.handle->inflight.load());
    a->set_calls_total(CallCounts(e).first);
    a->set_last_error(e.last_error);
  }
  return r;
}

}  // namespace farcall::router
