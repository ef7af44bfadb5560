// The XLA FFI handler behind farcall.jax.buffer_callback on the CPU backend:
// XLA's own buffers go to the agent through the C++ client, with no Python
// and no GIL on the path. Built only when jaxlib's FFI headers were found.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "core/error_reason.h"
#include "core/status_macros.h"
#include "farcall/client.h"
#include "nanobind/stl/string.h"
#include "python/ext/extension.h"
#include "python/ext/ffi_call.h"
#include "python/ext/waiting_threads.h"

namespace nb = nanobind;
namespace ffi = xla::ffi;

namespace farcall::python {
namespace {

// Abseil 20220623 has its own string_view.
absl::string_view Absl(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// Clients for the life of the process, by connection key: XLA calls
// handlers from many threads, and clients share channels anyway. A key is a
// plain target (plaintext, no token), or one that Connection() made for a
// target with TLS or a token: the secrets stay here, out of the program's
// attributes (which JAX prints in its IR dumps).
absl::Mutex clients_mu(absl::kConstInit);
std::map<std::string, std::unique_ptr<Client>, std::less<>>* clients ABSL_GUARDED_BY(clients_mu) =
    new std::map<std::string, std::unique_ptr<Client>, std::less<>>();

absl::StatusOr<Client*> ClientForLocked(std::string_view key)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(clients_mu) {
  auto it = clients->find(key);
  if (it != clients->end()) return it->second.get();
  absl::StatusOr<std::unique_ptr<Client>> c = Client::Connect(std::string(key));
  if (!c.ok()) return c.status();
  return clients->emplace(std::string(key), *std::move(c)).first->second.get();
}

absl::StatusOr<Client*> ClientFor(std::string_view key) {
  // Each XLA thread remembers the last client it used, so that the global
  // lock is off the path of a step that calls one target (clients are never
  // destroyed, so the pointer stays good).
  thread_local std::string last_key;
  thread_local Client* last = nullptr;
  if (last != nullptr && key == last_key) return last;
  absl::MutexLock l(&clients_mu);
  absl::StatusOr<Client*> c = ClientForLocked(key);
  if (c.ok()) {
    last_key = std::string(key);
    last = *c;
  }
  return c;
}

// A connection key for `target` reached with `options`.
std::string Connection(const std::string& target, const ClientOptions& options) {
  absl::StatusOr<std::unique_ptr<Client>> c = Client::Connect(target, options);
  if (!c.ok()) RaiseStatus(c.status());
  absl::MutexLock l(&clients_mu);
  std::string key = absl::StrCat(target, "#", clients->size());
  clients->emplace(key, *std::move(c));
  return key;
}

// Reads "<len>:<bytes>" from the front of `in`.
bool TakeCounted(absl::string_view& in, absl::string_view* out) {
  size_t colon = in.find(':');
  size_t n = 0;
  if (colon == absl::string_view::npos || !absl::SimpleAtoi(in.substr(0, colon), &n) ||
      in.size() - colon - 1 < n) {
    return false;
  }
  *out = in.substr(colon + 1, n);
  in.remove_prefix(colon + 1 + n);
  return true;
}

// Entries of a type letter (i, f, b, s) and two counted strings each: name
// and value. Python writes floats with repr(), which round-trips.
absl::Status DecodeAttributes(absl::string_view in, std::map<std::string, AttributeValue>* out) {
  const absl::Status bad = absl::InvalidArgumentError("farcall: malformed attribute encoding.");
  while (!in.empty()) {
    char type = in.front();
    in.remove_prefix(1);
    absl::string_view name, value;
    if (!TakeCounted(in, &name) || !TakeCounted(in, &value)) return bad;
    std::string key(name);
    switch (type) {
      case 'i': {
        int64_t v = 0;
        if (!absl::SimpleAtoi(value, &v)) return bad;
        (*out)[key] = v;
        break;
      }
      case 'f': {
        double v = 0;  // not strtod: that follows the C locale's decimal point
        if (!absl::SimpleAtod(value, &v)) return bad;
        (*out)[key] = v;
        break;
      }
      case 'b':
        (*out)[key] = value == "1";
        break;
      case 's':
        (*out)[key] = std::string(value);
        break;
      default:
        return bad;
    }
  }
  return absl::OkStatus();
}

// farcall/_resident.py's RESIDENTS_ATTRIBUTE ("POS/DTYPE/D0,D1/LEN:HANDLE"
// per resident of farcall.jax's resident=): each resident goes at its
// place among the call's args, aliased to a result of its own after the
// call's results (it stays on the agent: nothing is written here), and
// RESIDENT_IN_ATTRIBUTE tells the agent where they are.
absl::Status PlaceResidents(CallRequest& req) {
  auto it = req.attributes.find("_farcall.residents");
  if (it == req.attributes.end()) return absl::OkStatus();
  const absl::Status bad = absl::InvalidArgumentError("farcall: malformed resident encoding.");
  const std::string* text = std::get_if<std::string>(&it->second);
  if (text == nullptr) return bad;
  std::map<size_t, Resident> at;
  absl::string_view in = *text;
  while (!in.empty()) {
    std::vector<absl::string_view> head;
    for (int k = 0; k < 3; ++k) {
      const size_t slash = in.find('/');
      if (slash == absl::string_view::npos) return bad;
      head.push_back(in.substr(0, slash));
      in.remove_prefix(slash + 1);
    }
    size_t pos = 0;
    int code = 0;
    Resident r;
    if (!absl::SimpleAtoi(head[0], &pos) || !absl::SimpleAtoi(head[1], &code)) return bad;
    r.spec.dtype = static_cast<DType>(code);
    for (absl::string_view d : absl::StrSplit(head[2], ',', absl::SkipEmpty())) {
      int64_t n = 0;
      if (!absl::SimpleAtoi(d, &n)) return bad;
      r.spec.dims.push_back(n);
    }
    absl::string_view handle;
    if (!TakeCounted(in, &handle)) return bad;
    r.handle = std::string(handle);
    r.platform = req.platform;
    if (!at.emplace(pos, std::move(r)).second) return bad;
  }
  req.attributes.erase(it);
  const size_t total = req.args.size() + at.size();
  std::vector<Arg> wire;
  std::vector<size_t> wire_of(req.args.size());
  size_t next = 0;
  for (size_t pos = 0; pos < total; ++pos) {
    if (auto r = at.find(pos); r != at.end()) {
      wire.push_back(Arg::Of(r->second));
    } else {
      if (next >= req.args.size()) return bad;
      wire_of[next] = pos;
      wire.push_back(req.args[next++]);
    }
  }
  if (next != req.args.size()) return bad;  // a place past the args
  std::map<uint32_t, uint32_t> aliases;
  for (const auto& [i, o] : req.aliases) aliases[static_cast<uint32_t>(wire_of[i])] = o;
  std::vector<std::string> places;
  for (const auto& [pos, r] : at) {
    aliases[static_cast<uint32_t>(pos)] = static_cast<uint32_t>(req.results.size());
    req.results.push_back(r.spec);
    req.result_memory.push_back(nullptr);
    places.push_back(absl::StrCat(pos));
  }
  req.args = std::move(wire);
  req.aliases = std::move(aliases);
  req.attributes["_farcall.resident_in"] = absl::StrJoin(places, ",");
  return absl::OkStatus();
}

// The threads that wait for remote calls (python/ext/waiting_threads.h):
// one per call in flight that is not on XLA's thread, at most
// kMaxWaitingThreads; past that, calls queue in order (their deadlines run
// meanwhile).
constexpr int kMaxWaitingThreads = 64;
void RunWaiting(std::function<void()> task) {
  // Never destroyed: its threads may outlive main.
  static auto* threads = new WaitingThreads(kMaxWaitingThreads, absl::Seconds(10));
  threads->Run(std::move(task));
}

// How long each handler's calls at each target took lately (a moving
// average of whole calls that succeeded, retries included: a failure that
// came at once, an agent away, says nothing of the handler), to choose how
// the next one waits. Keys come from compiled programs, so they are few:
// each key's average is made on first use and kept, so a call looks it up
// once and reads and updates it without a lock.
class RecentDurations {
 public:
  // `key`'s average in nanoseconds; 0 until a call ended.
  static std::atomic<int64_t>& Of(const std::string& key) {
    static auto* recent = new RecentDurations();
    absl::MutexLock l(&recent->mu_);
    return recent->recent_[key];  // std::map: the entry never moves
  }
  // Folds one call's duration into `average`. Two calls that end at once
  // may each fold theirs into the same old value; the average is a hint.
  static void Add(std::atomic<int64_t>& average, absl::Duration took) {
    const int64_t ns = absl::ToInt64Nanoseconds(took);
    const int64_t old = average.load(std::memory_order_relaxed);
    average.store(old == 0 ? std::max<int64_t>(ns, 1) : (old * 3 + ns) / 4,
                  std::memory_order_relaxed);
  }

 private:
  absl::Mutex mu_;
  std::map<std::string, std::atomic<int64_t>> recent_ ABSL_GUARDED_BY(mu_);
};

// Calls that lately took less than this wait on XLA's thread (CpuCall).
constexpr absl::Duration kBlockingBelow = absl::Microseconds(500);

// How long a call polls for its answer (CallOptions::busy_poll) unless
// buffer_callback's busy_poll says: a quick call (on XLA's thread; its
// retries too), twice its handler's recent average; any other call, not at
// all (it waits on a thread of farcall's, and XLA runs the step's other
// work meanwhile).
// XLA's thread would sleep through the call otherwise, and waking it costs
// a quick 64 B call on loopback about a quarter of its time
// (docs/performance.md).
absl::Duration PollFor(bool quick, int64_t average_ns) {
  return quick ? std::min(absl::Nanoseconds(2 * average_ns), kBlockingBelow) : absl::ZeroDuration();
}

// Calls with side effects in one execution of a program (XLA's RunId) run
// one after the other, each once the one before has ended, in the order
// their custom calls start. XLA starts side-effecting custom calls in
// program order, but a call made in two halves (CpuStart, CpuDone) has ended
// only at its CpuDone, and XLA may start the next call before that.
class SideEffectChains {
 public:
  struct Link {
    absl::Mutex mu;
    bool ended ABSL_GUARDED_BY(mu) = false;
    std::function<void()> next ABSL_GUARDED_BY(mu);
  };
  // Runs `start` now, or, if the run's previous call with side effects has
  // not ended, once it has (on the thread that ends it: `start` must not
  // block). Returns this call's link, for End.
  static std::shared_ptr<Link> Enter(int64_t run, std::function<void()> start) {
    auto me = std::make_shared<Link>();
    std::shared_ptr<Link> before;
    {
      SideEffectChains& all = Get();
      absl::MutexLock l(&all.mu_);
      std::shared_ptr<Link>& tail = all.tails_[run];
      before = std::move(tail);
      tail = me;
    }
    if (before != nullptr) {
      absl::MutexLock l(&before->mu);
      if (!before->ended) {
        before->next = std::move(start);
        return me;
      }
    }
    start();
    return me;
  }
  // The call of `me` has ended: the next one starts.
  static void End(int64_t run, const std::shared_ptr<Link>& me) {
    {
      SideEffectChains& all = Get();
      absl::MutexLock l(&all.mu_);
      auto it = all.tails_.find(run);
      if (it != all.tails_.end() && it->second == me) all.tails_.erase(it);
    }
    std::function<void()> next;
    {
      absl::MutexLock l(&me->mu);
      me->ended = true;
      next = std::move(me->next);
    }
    if (next) next();
  }

 private:
  static SideEffectChains& Get() {
    static auto* all = new SideEffectChains();  // never destroyed: threads outlive main
    return *all;
  }
  absl::Mutex mu_;
  absl::flat_hash_map<int64_t, std::shared_ptr<Link>> tails_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

void RemoteCall::Start() {
  auto self = shared_from_this();
  RunWaiting([self] { self->StartHere(); });
}

void RemoteCall::StartHere() {
  options.timeout = deadline - absl::Now();
  done(client->Call(request, options).status());
}

namespace {

// A call of `attrs` over `in` and `out`, with the options and deadline they
// give: what the cpu halves, the one cpu call and the cuda call share.
absl::StatusOr<std::shared_ptr<RemoteCall>> NewRemoteCall(
    const FfiCallAttrs& attrs, const std::vector<HostTensor>& in,
    const std::vector<HostTensor>& out, const std::vector<int64_t>& output_of_input) {
  absl::StatusOr<CallRequest> request = RequestFor(attrs, in, out, output_of_input);
  if (!request.ok()) return request.status();
  absl::StatusOr<Client*> client = ClientFor(attrs.target);
  if (!client.ok()) return client.status();
  auto call = std::make_shared<RemoteCall>();
  call->client = *client;
  call->request = *std::move(request);
  call->options = OptionsFor(attrs);
  call->deadline = absl::Now() + absl::Seconds(attrs.timeout);
  return call;
}

}  // namespace

absl::StatusOr<PreparedCall> PrepareCall(const FfiCallAttrs& attrs,
                                         const std::vector<HostTensor>& in,
                                         const std::vector<HostTensor>& out,
                                         const std::vector<int64_t>& output_of_input) {
  PreparedCall p;
  p.start = absl::Now();
  absl::StatusOr<std::shared_ptr<RemoteCall>> call = NewRemoteCall(attrs, in, out, output_of_input);
  if (!call.ok()) return call.status();
  p.call = *std::move(call);
  p.recent = &RecentDurations::Of(absl::StrCat(Absl(attrs.target), "#", Absl(attrs.handler)));
  const int64_t average_ns = p.recent->load(std::memory_order_relaxed);
  p.quick = average_ns > 0 && average_ns < absl::ToInt64Nanoseconds(kBlockingBelow);
  if (attrs.busy_poll < 0) p.call->options.busy_poll = PollFor(p.quick, average_ns);
  return p;
}

void NoteDuration(const PreparedCall& p, const absl::Status& s) {
  if (s.ok()) RecentDurations::Add(*p.recent, absl::Now() - p.start);
}

void StartInOrder(const std::shared_ptr<RemoteCall>& call, bool has_side_effect, int64_t run,
                  bool quick) {
  if (!has_side_effect) {
    quick ? call->StartHere() : call->Start();
    return;
  }
  auto link = std::make_shared<std::shared_ptr<SideEffectChains::Link>>();
  call->done = [run, link, done = std::move(call->done)](const absl::Status& s) {
    SideEffectChains::End(run, *link);
    done(s);
  };
  // 0: Enter has not returned; 1: the call may start, and the caller starts
  // it; 2: the caller left it to whoever ends the call before it.
  auto state = std::make_shared<std::atomic<int>>(0);
  *link = SideEffectChains::Enter(run, [call, state] {
    int pending = 0;
    if (!state->compare_exchange_strong(pending, 1)) call->Start();
  });
  int pending = 0;
  if (!state->compare_exchange_strong(pending, 2)) quick ? call->StartHere() : call->Start();
}

namespace {

// Asynchronous: a waiting thread makes the call and the handler returns at
// once, so XLA runs the step's independent work meanwhile; the future
// completes on that thread when the call ends (and XLA may go on with the
// program there). XLA keeps the buffers and the attributes (the
// executable's) alive until it does.
//
// Except for quick calls: a handler whose calls lately ended within
// kBlockingBelow is called on XLA's thread, which waits for the answer
// itself. That saves the hand-offs to a waiting thread and back (tens of
// microseconds of a 250 us call on loopback) and forgoes at most that long
// of overlap. Its retries, should it fail in a way that may go again, wait
// there too.
ffi::Future CpuCall(ffi::RunId run, ffi::RemainingArgs args, ffi::RemainingRets rets,
                    std::string_view target, std::string_view handler, std::string_view platform,
                    std::string_view aliases, std::string_view attributes, double timeout,
                    bool has_side_effect, bool wait_for_ready, int64_t retries, double busy_poll) {
  ffi::Promise promise;
  ffi::Future future(promise);
  auto fail = [&](ffi::Error e) {
    promise.SetError(std::move(e));
    return std::move(future);
  };
  FfiCallAttrs attrs{target,  handler,         platform,       aliases, attributes,
                     timeout, has_side_effect, wait_for_ready, retries, busy_poll};
  std::vector<HostTensor> in, out;
  for (size_t i = 0; i < args.size(); ++i) {
    ffi::ErrorOr<ffi::AnyBuffer> b = args.get<ffi::AnyBuffer>(i);
    if (!b.has_value()) return fail(b.error());
    in.push_back({SpecOf(*b), b->untyped_data(), b->size_bytes()});
  }
  for (size_t o = 0; o < rets.size(); ++o) {
    ffi::ErrorOr<ffi::Result<ffi::AnyBuffer>> b = rets.get<ffi::AnyBuffer>(o);
    if (!b.has_value()) return fail(b.error());
    out.push_back({SpecOf(**b), (*b)->untyped_data(), (*b)->size_bytes()});
  }
  std::vector<int64_t> output_of_input;
  absl::Status s = ParseAliases(aliases, in.size(), out.size(), &output_of_input);
  if (!s.ok()) return fail(ToFfiError(s));
  for (size_t i = 0; i < in.size(); ++i) {
    // XLA gives an aliased operand and its result one buffer; should it ever
    // not, the result starts as a copy of the input and stands in for it.
    const int64_t o = output_of_input[i];
    if (o >= 0 && out[o].data != in[i].data) {
      std::memcpy(out[o].data, in[i].data, in[i].bytes);
      in[i].data = out[o].data;
    }
  }
  absl::StatusOr<PreparedCall> prepared = PrepareCall(attrs, in, out, output_of_input);
  if (!prepared.ok()) return fail(ToFfiError(prepared.status()));
  prepared->call->done = [promise, p = *prepared](const absl::Status& s) mutable {
    NoteDuration(p, s);
    s.ok() ? promise.SetAvailable() : promise.SetError(ToFfiError(s));
  };
  StartInOrder(prepared->call, attrs.has_side_effect, run.run_id, prepared->quick);
  return future;
}

}  // namespace

TensorSpec SpecOf(const ffi::AnyBuffer& b) {
  TensorSpec spec;
  spec.dtype = static_cast<DType>(b.element_type());
  auto dims = b.dimensions();
  spec.dims.assign(dims.begin(), dims.end());
  return spec;
}

absl::Status ParseAliases(std::string_view text, size_t n_in, size_t n_out,
                          std::vector<int64_t>* output_of_input) {
  output_of_input->assign(n_in, -1);
  for (absl::string_view pair : absl::StrSplit(Absl(text), ',', absl::SkipEmpty())) {
    std::pair<absl::string_view, absl::string_view> io = absl::StrSplit(pair, ':');
    uint32_t i = 0, o = 0;
    if (!absl::SimpleAtoi(io.first, &i) || !absl::SimpleAtoi(io.second, &o) || i >= n_in ||
        o >= n_out) {
      return absl::InvalidArgumentError("farcall: malformed aliases attribute.");
    }
    (*output_of_input)[i] = o;
  }
  return absl::OkStatus();
}

absl::StatusOr<CallRequest> RequestFor(const FfiCallAttrs& attrs, const std::vector<HostTensor>& in,
                                       const std::vector<HostTensor>& out,
                                       const std::vector<int64_t>& output_of_input) {
  CallRequest req;
  req.handler = std::string(attrs.handler);
  req.platform = std::string(attrs.platform);
  req.has_side_effect = attrs.has_side_effect;
  absl::Status s = DecodeAttributes(Absl(attrs.attributes), &req.attributes);
  if (!s.ok()) return s;
  for (size_t i = 0; i < in.size(); ++i) {
    if (output_of_input[i] >= 0) {
      req.aliases[static_cast<uint32_t>(i)] = static_cast<uint32_t>(output_of_input[i]);
      req.args.push_back(Arg::InOut(in[i].spec, in[i].data));
    } else {
      req.args.push_back(Arg::In(in[i].spec, in[i].data));
    }
  }
  for (const HostTensor& r : out) {
    req.results.push_back(r.spec);
    req.result_memory.push_back(r.data);  // written in place
  }
  FARCALL_RETURN_IF_ERROR(PlaceResidents(req));
  return req;
}

CallOptions OptionsFor(const FfiCallAttrs& attrs) {
  CallOptions options;
  options.wait_for_ready = attrs.wait_for_ready;
  // One id for every attempt: an agent's ledger runs a call with side
  // effects once however often it is sent.
  if (attrs.has_side_effect) options.call_id = NewCallId();
  options.retries = static_cast<int>(std::clamp<int64_t>(attrs.retries, 0, 1000));
  if (attrs.busy_poll > 0) options.busy_poll = absl::Seconds(attrs.busy_poll);
  return options;
}

absl::Status CallRemote(const FfiCallAttrs& attrs, const std::vector<HostTensor>& in,
                        const std::vector<HostTensor>& out,
                        const std::vector<int64_t>& output_of_input) {
  // No moving average and no polling unless busy_poll says so: the cuda
  // handler waits on XLA's stream thread whatever the call's length.
  absl::StatusOr<std::shared_ptr<RemoteCall>> call = NewRemoteCall(attrs, in, out, output_of_input);
  if (!call.ok()) return call.status();
  (*call)->options.timeout = absl::Seconds(attrs.timeout);
  return (*call)->client->Call((*call)->request, (*call)->options).status();
}

ffi::Error ToFfiError(const absl::Status& s) {
  if (s.ok()) return ffi::Error::Success();
  // A Python handler's traceback follows the contract's message, as it
  // would follow a local callback's error.
  std::string traceback = TracebackOf(s);
  std::string message(s.message());
  if (!traceback.empty()) message += "\nRemote traceback (the agent's handler):\n" + traceback;
  return ffi::Error(static_cast<ffi::ErrorCode>(s.code()), std::move(message));
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(FarcallXlaCpuCall, CpuCall,
                              BindCall(ffi::Ffi::Bind().Ctx<ffi::RunId>()));

void DefineFfi(nb::module_& m) {
  m.def(
      "ffi_connection",
      [](const std::string& target, const ClientOptions& options) {
        return Connection(target, options);
      },
      nb::arg("target"), nb::arg("options"));
  // {XLA platform name: capsule}, for jax.ffi.register_ffi_target.
  m.def("ffi_handlers", [] {
    nb::dict d;
    d["cpu"] = nb::capsule(reinterpret_cast<void*>(&FarcallXlaCpuCall), "xla._CUSTOM_CALL_TARGET");
    AddCudaFfiHandler(d);
    return d;
  });
  // The two halves of a call without aliases on the CPU backend
  // (python/ext/ffi_halves.cc): {"start": capsule, "done": capsule}.
  m.def("ffi_cpu_halves", [] {
    nb::dict d;
    AddCpuHalves(d);
    return d;
  });
}

}  // namespace farcall::python
