// The router's view of its agents: discovery (Describe), health (the
// standard health service), and load (calls in flight).
//
// Thread safety: all methods may be called from any thread.
#ifndef FARCALL_SERVER_AGENT_POOL_H_
#define FARCALL_SERVER_AGENT_POOL_H_

#include <algorithm>
#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "core/platform.h"
#include "farcall/v1/farcall.grpc.pb.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/security/credentials.h"

namespace farcall::router {

// One agent. Stubs are immutable; state is guarded by the pool.
struct AgentHandle {
  std::string address;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<grpc::GenericStub> generic;
  std::atomic<int64_t> inflight{0};  // calls this router forwards there now
  // Calls the agent said it holds (from every client) at its last probe.
  std::atomic<int64_t> reported_inflight{0};
  // The load to weigh it by: the larger of the two.
  int64_t load() const { return std::max(inflight.load(), reported_inflight.load()); }
  std::atomic<uint64_t> calls_total{0};
  // Its AgentInfo.agent_id at the last probe that described it ("" before).
  std::string id() const {
    absl::MutexLock l(&id_mu);
    return agent_id;
  }
  mutable absl::Mutex id_mu;
  std::string agent_id ABSL_GUARDED_BY(id_mu);
  // Calls routed here that ended in an error, and the last such error.
  std::atomic<uint64_t> errors_total{0};
  void RecordError(absl::string_view error);
  absl::Mutex error_mu;
  std::string last_call_error ABSL_GUARDED_BY(error_mu);
  absl::Time last_call_error_time ABSL_GUARDED_BY(error_mu);
};

// One agent as the router's status page shows it.
struct AgentStatus {
  std::string address;
  std::string agent_id;
  std::string platform;
  std::string health;       // SERVING, NOT_SERVING, DOWN or UNKNOWN
  std::string probe_error;  // why it is not serving, when it is not
  int64_t inflight = 0;
  uint64_t calls_total = 0;
  uint64_t errors_total = 0;
  double call_rate = 0;         // calls per second over the last minute
  double error_rate = 0;        // failed calls per second over the last minute
  std::string last_call_error;  // empty: none yet
  absl::Time last_call_error_time;
  std::vector<std::string> handlers;
};

class AgentPool {
 public:
  struct Options {
    absl::Duration probe_interval = absl::Milliseconds(250);
    absl::Duration probe_timeout = absl::Milliseconds(500);
    // How the router reaches agents: TLS (null: plaintext), and the
    // `authorization` value its probes carry (empty: none).
    std::shared_ptr<grpc::ChannelCredentials> credentials;
    std::string authorization;
    // With TLS: the name agents' certificates are checked against, instead
    // of each agent's address (one certificate for agents found by DNS).
    std::string tls_server_name;
  };

  // `sources` are --agents entries: HOST:PORT, or dns:///NAME:PORT for every
  // address NAME resolves to (see agent_discovery.h).
  AgentPool(const std::vector<std::string>& sources, Options options);
  ~AgentPool();

  // Re-resolves dns:/// sources, then probes every agent once and waits
  // for the answers.
  void ProbeAll();
  // Probes every agent known now, without waiting: `done` runs (on a gRPC
  // thread) once every answer is in. For callers that must not block, such
  // as ListAgents(refresh).
  void ProbeAllAsync(std::function<void()> done);
  // Probes in the background every probe_interval until destroyed.
  void StartProbing();

  // The live agents of `platform` that serve `handler`. UNAVAILABLE when no
  // agent of the platform is live; NOT_FOUND when none has the handler.
  absl::StatusOr<std::vector<std::shared_ptr<AgentHandle>>> Candidates(
      Platform platform, absl::string_view handler) const;

  // The agent whose id is `agent_id`, while it answers: serving, or
  // draining (a draining agent still takes the calls that name its
  // resident arrays). Null when none is known, or it is down.
  std::shared_ptr<AgentHandle> Holder(absl::string_view agent_id) const;

  // Marks an agent down at once, e.g. after a call could not reach it.
  void MarkDown(const AgentHandle& agent, absl::string_view why);

  v1::ListAgentsResponse List() const;
  absl::Duration probe_interval() const { return options_.probe_interval; }
  // Every agent with its load and recent rates, for the status page.
  std::vector<AgentStatus> Status() const;

 private:
  struct Entry {
    std::shared_ptr<AgentHandle> handle;
    std::string source;  // the --agents entry it came from
    v1::AgentInfo info;
    bool described = false;
    absl::Time described_at;  // when `info` came
    v1::AgentEntry::Health health = v1::AgentEntry::UNKNOWN;
    std::string last_error;
    std::string published_platform;  // the platform label it is exported under
    // The agent's call and error totals over the last minute, a sample per
    // probe round, for rates.
    struct Sample {
      absl::Time time;
      uint64_t calls;
      uint64_t errors;
    };
    std::deque<Sample> samples;
  };
  // --agents entries that named no agent at their last lookup.
  std::set<std::string> empty_sources_ ABSL_GUARDED_BY(mu_);
  // The live agent other than `asking` that already has agent id `id`, or
  // null.
  const Entry* IdHolder(const std::string& id, const AgentHandle& asking) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes a rate sample of every agent (each probe round).
  void SampleRates();
  // The calls an agent ended and those that failed: its own count at the
  // last probe, or the calls forwarded to it, whichever is more.
  static std::pair<uint64_t, uint64_t> CallCounts(const Entry& e);
  struct Probe;
  // Health, then Describe when needed, asynchronously; `done` runs after
  // the outcome is recorded.
  void ProbeOne(const std::shared_ptr<AgentHandle>& h, std::function<void()> done);
  void Record(Probe& p);
  // Adds agents that dns:/// sources now name, drops those they no longer do.
  void Resolve();
  std::shared_ptr<AgentHandle> Connect(const std::string& address) const;

  const Options options_;
  const std::vector<std::string> sources_;
  mutable absl::Mutex mu_;
  std::vector<Entry> entries_ ABSL_GUARDED_BY(mu_);
  int probes_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Notification stop_;
  std::thread prober_;
};

}  // namespace farcall::router

#endif  // FARCALL_SERVER_AGENT_POOL_H_
