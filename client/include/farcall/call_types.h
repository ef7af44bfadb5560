// The client's public value types: a call's request, options and result,
// the client's options, and what agents and routers say of themselves.
// farcall/client.h (the Client class) includes this header; code that only
// builds requests or reads results may include it alone.
#ifndef FARCALL_CLIENT_INCLUDE_FARCALL_CALL_TYPES_H_
#define FARCALL_CLIENT_INCLUDE_FARCALL_CALL_TYPES_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "farcall/tensor_spec.h"

namespace farcall {

// An array left on an agent between calls (a resident): what Client::Put
// returns, and what a call's kept result is. Its bytes stay in that agent's
// memory (device memory on GPU agents); the handle names it, and only to the
// caller that made it. Calls that name it go to that agent; if that agent is
// gone they fail NOT_FOUND, marked "resident lost" (Client::Get takes a
// snapshot to Put again). Copyable: a copy names the same array.
struct Resident {
  std::string handle;
  TensorSpec spec;
  std::string platform = "cpu";
  // The id of the agent that holds it, as the handle says.
  std::string agent_id() const;
};

// One argument: a spec and the caller's memory, ByteSize(spec) bytes.
class Arg {
 public:
  // A resident array: no bytes travel, the handler reads it on the agent,
  // and a result aliased to it updates it there (the result comes back as
  // that Resident).
  static Arg Of(const Resident& resident) {
    Arg a(resident.spec, nullptr, false);
    a.resident_ = resident.handle;
    return a;
  }
  // The resident's handle, for an Arg::Of; else empty.
  const std::string& resident() const { return resident_; }
  // Read-only input.
  static Arg In(TensorSpec spec, const void* data) {
    return Arg(std::move(spec), const_cast<void*>(data), false);
  }
  // An input that a result may alias: that result is written back here.
  static Arg InOut(TensorSpec spec, void* data) { return Arg(std::move(spec), data, true); }
  const TensorSpec& spec() const { return spec_; }
  const uint8_t* data() const { return static_cast<const uint8_t*>(data_); }
  uint8_t* writable_data() const { return writable_ ? static_cast<uint8_t*>(data_) : nullptr; }

 private:
  Arg(TensorSpec spec, void* data, bool writable)
      : spec_(std::move(spec)), data_(data), writable_(writable) {}
  TensorSpec spec_;
  void* data_;
  bool writable_;
  std::string resident_;
};

using AttributeValue = std::variant<int64_t, double, bool, std::string>;

struct CallRequest {
  std::string handler;
  std::string platform = "cpu";
  std::vector<Arg> args;
  std::vector<TensorSpec> results;
  std::map<uint32_t, uint32_t> aliases;  // input index -> output index
  std::map<std::string, AttributeValue> attributes;
  bool has_side_effect = false;
  bool command_buffer_compatible = false;
  // Where non-aliased results go: empty, and the client allocates each one;
  // or one pointer per result, to ByteSize(results[o]) writable bytes of the
  // caller's (nullptr: the client allocates that one). The memory must stay
  // valid until the call completes. Aliased results always go into their
  // InOut arg; their entry here is ignored.
  std::vector<void*> result_memory;
  // Sent instead of `platform` when not empty. Calls name exactly one
  // platform; more are refused with UNIMPLEMENTED, as in JAX. For tests of
  // that answer.
  std::vector<std::string> platforms;
  // Results the agent keeps as new residents instead of sending them back
  // (ResultTensor::resident names each); their TTL after their last use
  // (zero: the agent's --resident_ttl). Calls that name residents in any
  // way travel over gRPC (not shared memory or UCX).
  std::vector<uint32_t> keep_results;
  absl::Duration resident_ttl = absl::ZeroDuration();
  // Residents the agent frees once the call has run (Client::Delete).
  std::vector<std::string> release_residents;
};

// How a call's tensors travel; the call itself always goes over gRPC.
//   kAuto  when the call asks for no RPC shape (Rpc::kAuto): shared memory
//          for calls of at least shm_min_bytes when the agent (the target,
//          or the one a router names) is on this host and offers it; else
//          UCX for calls of at least ucx_min_bytes to an agent that offers
//          it; else gRPC (see below);
//   kGrpc  in the gRPC messages;
//   kShm   staged in a memfd region shared with a same-host agent, only the
//          header crossing gRPC; FAILED_PRECONDITION when the agent is not
//          on this host or offers none;
//   kUcx   UCX (builds with UCX): only the header crosses gRPC, and the
//          tensors go as tagged UCX messages straight between the caller's
//          memory and the agent's tensors; FAILED_PRECONDITION when the
//          agent offers none, through a router (via_router), with
//          Rpc::kStream, or in a build without UCX.
// A call (blocking or not) that kAuto sent over UCX, whose args could not
// go (the agent's worker unreachable from here), goes again over gRPC within
// what is left of its timeout, and later calls skip UCX for a while.
enum class Transport { kAuto, kGrpc, kShm, kUcx };

// The gRPC call's shape: kUnary, one message each way (`Call`); kStream,
// the tensors in chunks (`Execute`); kAuto, unary for calls whose args and
// results each fit in one chunk.
enum class Rpc { kAuto, kUnary, kStream };

namespace client_internal {
class StopHook;
}

// Stops calls on request, from any thread (as Arrow Flight's stop token
// does): share one with calls through CallOptions::stop, then Stop(). Each
// call that carries it and has not ended ends CANCELLED, "the caller stopped
// the call.": at once while it is on the wire, and before its next attempt
// while it waits to be sent again. Its handler may have run, or be running.
// One CallStop may stop many calls; Stop() again does nothing more.
//
//   auto stop = std::make_shared<farcall::CallStop>();
//   options.stop = stop;
//   client->CallAsync(request, options, done);
//   stop->Stop();  // done gets CANCELLED unless the call had ended
class CallStop {
 public:
  CallStop();
  ~CallStop();
  CallStop(const CallStop&) = delete;
  CallStop& operator=(const CallStop&) = delete;
  void Stop();
  bool stopped() const;

 private:
  friend class client_internal::StopHook;
  struct State;
  std::shared_ptr<State> state_;
};

struct CallOptions {
  absl::Duration timeout = absl::Seconds(60);
  // Bytes of tensor data per message. Calls whose args and results each fit
  // in one chunk use the unary Call RPC.
  int64_t chunk_bytes = 1 << 20;
  // The call's idempotency key; empty: a fresh one. An agent runs a call
  // with has_side_effect at most once per key (it replays the answer, or
  // answers ALREADY_EXISTS): give the same key when retrying such a call.
  std::string call_id;
  Transport transport = Transport::kAuto;
  Rpc rpc = Rpc::kAuto;
  // false: with kAuto, never shared memory.
  bool allow_shm = true;
  // With kAuto: calls whose args and results add up to fewer bytes stay on
  // gRPC, which is as fast or faster for them on one host (measured
  // crossover: docs/performance.md).
  int64_t shm_min_bytes = int64_t{64} << 10;
  // With kAuto: calls whose args and results add up to fewer bytes stay on
  // gRPC (UCX's ready exchange costs more than it saves for them).
  int64_t ucx_min_bytes = int64_t{1} << 20;
  // Wait (within the timeout) for an unreachable target to come up instead
  // of failing at once with UNAVAILABLE. Either way a target that went away
  // is tried again at most a second apart, so a restarted agent is reached
  // within about a second of serving again.
  bool wait_for_ready = false;
  // false: send the call without checking it here first, so that the
  // servers' answers to a bad call can be observed (their codes and messages
  // are the same as the client's own checks). For conformance tests; such
  // calls to a router go through it (as with via_router).
  bool validate_locally = true;
  // With a router as the target: false (the default) asks the router which
  // agents may serve the call (Router.Resolve, cached for the router's probe
  // interval) and calls one of them directly, so that the tensors do not
  // pass through the router; a call that could not reach that agent goes to
  // the next one, and to the router when none can be reached or an agent
  // refuses this client's token. true: every call goes through the router,
  // for clients that cannot reach the agents.
  bool via_router = false;
  // Stops this call when stopped (null: nothing but the deadline does).
  std::shared_ptr<CallStop> stop;
  // How long a blocking call (Client::Call) that takes the unary RPC over
  // gRPC (a small call) polls for its answer before its thread sleeps. Zero
  // (the default): it sleeps at once. Polling keeps the thread on its core,
  // which saves the wake-up and the cold caches after it (on a loopback 64 B
  // call, 50-120 us of about 225: docs/performance.md) and spends that core
  // meanwhile. At most half the machine's cores poll at once; a call that
  // finds them all polling sleeps. Other calls (asynchronous, streamed,
  // shared memory, UCX) ignore it.
  absl::Duration busy_poll = absl::ZeroDuration();
  // How often a failed call is sent again to the same target, within its
  // timeout: after a failure that may be sent again, one that no handler ran
  // (the target draining, no live agent), and, for a call without side
  // effects, UNAVAILABLE that no handler raised (an agent gone), after
  // 50 ms doubling to 1 s. 0 (the default): never. Whatever it says, a call
  // goes where another server can take it: a router's next agent (at once),
  // and through a router that drains or cannot be reached (up to 5 times
  // over 3.1 s). A call with side effects keeps its call_id, so it runs at
  // most once.
  int retries = 0;
  // A call whose aliased result had begun to land in its InOut memory when
  // it failed is never sent again from those bytes. false (the default): it
  // fails ABORTED, naming the arg and how much of it holds the result (the
  // status contract, docs/architecture.md). true: a call without side
  // effects that has aliases and may go again (retries) keeps a copy of each
  // aliased arg, made before the first attempt, and restores the arg from it
  // before it goes again; a call that fails in the end leaves the arg as it
  // was. Costs one copy of the aliased args per call, and that memory.
  bool keep_aliased_args = false;
};

// One result. An aliased result's bytes were written into the caller's
// InOut memory, and `data` points there. A same-host call's result that
// fills a quarter or more of its staging region stays there (`keepalive`
// holds the region); a smaller one is copied out, so that the region is
// reused.
struct ResultTensor {
  TensorSpec spec;
  int64_t size = 0;
  uint8_t* data = nullptr;
  bool aliased = false;
  std::unique_ptr<uint8_t[]> storage;  // owns `data` unless aliased
  std::shared_ptr<void> keepalive;     // holds a shared-memory result's region
  // A result that stayed on the agent (kept, or aliased to a resident arg):
  // its bytes did not come back, and `data` is null.
  std::optional<Resident> resident;

  template <typename T>
  const T* as() const {
    return reinterpret_cast<const T*>(data);
  }
};

struct CallResult {
  std::vector<ResultTensor> results;
  std::string agent_id;
  std::string platform;
  absl::Duration queue_time;
  absl::Duration transfer_time;
  absl::Duration execute_time;
  Transport transport = Transport::kAuto;  // how the tensors went: kGrpc, kShm or kUcx
  Rpc rpc = Rpc::kAuto;                    // which RPC carried the call: kUnary or kStream
  // Whether the call passed through a router (CallOptions::via_router, or
  // no agent could be called directly).
  bool via_router = false;
};

// Memory shared with a same-host agent (Client::AllocateShared). Args whose
// bytes lie in a SharedBuffer reach the agent without a copy, and a result
// aliased to such an arg is updated right there. Copyable; the memory lives
// until the last copy and the Client are gone.
class SharedBuffer {
 public:
  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  friend class Client;
  std::shared_ptr<void> region_;
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// How a Client reaches its target: TLS and a bearer token. The default is
// plaintext without a token.
struct ClientOptions {
  // PEM file paths. tls_ca alone: TLS, verifying the server against that CA
  // (tls_ca empty but a certificate given: the system's roots). tls_cert and
  // tls_key together: a client certificate, for servers that require one.
  std::string tls_ca;
  std::string tls_cert;
  std::string tls_key;
  // Sent as `authorization: Bearer TOKEN` on every call; empty: none. A
  // token never travels in clear beyond this host: Connect refuses a token
  // without TLS to a target that is not a loopback address, and a router's
  // agents that would get it so are not called directly, unless
  // allow_insecure_tokens says the network is trusted. Agents named by a
  // router that mints capabilities get those instead of the token.
  std::string token;
  bool allow_insecure_tokens = false;
  // With TLS: the name the target's certificate is checked against instead
  // of its address.
  std::string tls_server_name;
  // With TLS and a router as the target: the name the certificates of the
  // agents it names are checked against when they are called directly (one
  // certificate for many agents, as a router's --agent_tls_server_name);
  // empty: each agent's address.
  std::string agent_tls_server_name;
  // UCX transports for this process's UCX worker, in UCX_TLS's syntax
  // ("tcp", "rc,sm"); empty: UCX's choice (or the UCX_TLS environment
  // variable). Calls with other values use workers of their own.
  std::string ucx_transports;
};

using CallCallback = std::function<void(absl::StatusOr<CallResult>)>;

// What an agent says of itself (Client::Describe).
struct AgentDescription {
  struct Device {
    int ordinal = 0;
    std::string name;
    int64_t memory_bytes = 0;
  };
  struct Handler {
    std::string name;
    bool command_buffer_compatible = false;
    std::string source;  // "builtin" or the plugin's path
  };
  std::string agent_id;
  std::string platform;
  std::string version;
  std::vector<Device> devices;
  std::vector<Handler> handlers;
  int64_t max_call_bytes = 0;  // larger calls are refused
  std::string shm_socket;      // where same-host clients register shared memory; empty: none
  int64_t shm_regions = 0;     // shared-memory regions mapped now
  bool offers_ucx = false;     // the agent moves tensors over UCX for calls that ask
  // Calls the agent ended since it started, however they came, and those
  // that failed (its own counts: with lookaside none pass a router).
  uint64_t calls_total = 0;
  uint64_t failed_calls_total = 0;
  // Resident arrays it holds now, and their bytes.
  int64_t resident_count = 0;
  int64_t resident_bytes = 0;
  int64_t inflight_calls = 0;  // calls it holds now, from every client
  // Its last failed call, "CODE: message", and how long ago it ended
  // (empty: none since it started).
  std::string last_failed_call;
  absl::Duration last_failed_call_age;
};

// One agent as a router sees it (Client::ListAgents).
struct AgentStatus {
  enum class Health { kUnknown, kServing, kNotServing, kDown };
  std::string address;
  AgentDescription info;
  Health health = Health::kUnknown;
  int64_t inflight_calls = 0;
  std::string last_error;  // why it is not serving, when it is not
  // The calls the agent ended: its own count at the router's last probe
  // (info.calls_total: every call, however it came), or the calls the router
  // forwarded to it, whichever is more.
  uint64_t calls_total = 0;
};

// A fresh call id (128 random bits in hex), for a caller that sends one
// logical call several times (CallOptions::call_id).
std::string NewCallId();

// "UNKNOWN", "SERVING", "NOT_SERVING" or "DOWN", as the wire names them.
const char* HealthName(AgentStatus::Health health);

// "auto", "grpc", "shm" or "ucx", as the CLI and Python name transports;
// TransportNamed is the reverse (nullopt for any other name).
const char* TransportName(Transport transport);
std::optional<Transport> TransportNamed(std::string_view name);
// "auto", "unary" or "stream"; RpcNamed is the reverse.
const char* RpcName(Rpc rpc);
std::optional<Rpc> RpcNamed(std::string_view name);

}  // namespace farcall

#endif  // FARCALL_CLIENT_INCLUDE_FARCALL_CALL_TYPES_H_
