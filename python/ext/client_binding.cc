// farcall._farcall.Client: the C++ client, called with plain pointers, dtype
// codes and shapes that farcall/_client.py prepares. Results come back as
// flat uint8 numpy arrays that own the client's memory (no copy); the
// Python side views them with the right dtype and shape.
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/error_reason.h"
#include "farcall/client.h"
#include "nanobind/ndarray.h"
#include "nanobind/stl/map.h"
#include "nanobind/stl/shared_ptr.h"
#include "nanobind/stl/string.h"
#include "nanobind/stl/tuple.h"
#include "nanobind/stl/vector.h"
#include "python/ext/extension.h"

namespace nb = nanobind;

namespace farcall::python {
namespace {

using ArgTuple =
    std::tuple<uintptr_t, int, std::vector<int64_t>, bool>;  // ptr, dtype, dims, writable
using SpecTuple = std::tuple<int, std::vector<int64_t>>;     // dtype, dims

TensorSpec MakeSpec(int dtype, std::vector<int64_t> dims) {
  return TensorSpec{static_cast<DType>(dtype), std::move(dims)};
}

// A uint8 numpy array over `size` bytes at `data`, kept alive by `owner`.
template <typename Owner>
nb::object OwnedBytes(uint8_t* data, int64_t size, Owner owner) {
  auto* held = new Owner(std::move(owner));
  nb::capsule cap(held, [](void* p) noexcept { delete static_cast<Owner*>(p); });
  size_t shape[1] = {static_cast<size_t>(size)};
  return nb::cast(nb::ndarray<nb::numpy, uint8_t, nb::ndim<1>>(data, 1, shape, cap));
}

// A call's request from the Python layer's pieces (farcall/_client.py
// prepares them): the arrays as (address, dtype code, dims, writable).
CallRequest BuildRequest(const std::string& handler, const std::vector<std::string>& platforms,
                         const std::vector<ArgTuple>& args, const std::vector<SpecTuple>& results,
                         const std::map<uint32_t, uint32_t>& aliases, const nb::dict& attributes,
                         bool has_side_effect, const std::vector<uintptr_t>& result_memory,
                         const nb::dict& resident) {
  CallRequest r;
  r.handler = handler;
  if (platforms.size() == 1) {
    r.platform = platforms[0];
  } else {
    r.platforms = platforms;  // refused by the checks, as in JAX
  }
  // Resident arrays (farcall/_client.py's _Prepared.resident): "args"
  // {index: handle}, "keep" [result index], "ttl" seconds, "release" [handle].
  std::map<uint32_t, std::string> resident_args;
  if (resident.contains("args")) {
    resident_args = nb::cast<std::map<uint32_t, std::string>>(resident["args"]);
  }
  for (size_t i = 0; i < args.size(); ++i) {
    const auto& [ptr, dtype, dims, writable] = args[i];
    if (auto it = resident_args.find(static_cast<uint32_t>(i)); it != resident_args.end()) {
      r.args.push_back(Arg::Of(Resident{it->second, MakeSpec(dtype, dims), ""}));
      continue;
    }
    void* data = reinterpret_cast<void*>(ptr);
    r.args.push_back(writable ? Arg::InOut(MakeSpec(dtype, dims), data)
                              : Arg::In(MakeSpec(dtype, dims), data));
  }
  if (resident.contains("keep")) {
    r.keep_results = nb::cast<std::vector<uint32_t>>(resident["keep"]);
  }
  if (resident.contains("ttl")) {
    r.resident_ttl = absl::Seconds(nb::cast<double>(resident["ttl"]));
  }
  if (resident.contains("release")) {
    r.release_residents = nb::cast<std::vector<std::string>>(resident["release"]);
  }
  for (const auto& [dtype, dims] : results) r.results.push_back(MakeSpec(dtype, dims));
  r.aliases = aliases;
  for (auto [k, v] : attributes) {
    std::string name = nb::cast<std::string>(k);
    // bool before int: Python's bool is an int.
    if (nb::isinstance<nb::bool_>(v)) {
      r.attributes[name] = nb::cast<bool>(v);
    } else if (nb::isinstance<nb::int_>(v)) {
      r.attributes[name] = nb::cast<int64_t>(v);
    } else if (nb::isinstance<nb::float_>(v)) {
      r.attributes[name] = nb::cast<double>(v);
    } else {
      r.attributes[name] = nb::cast<std::string>(v);
    }
  }
  r.has_side_effect = has_side_effect;
  for (uintptr_t p : result_memory) r.result_memory.push_back(reinterpret_cast<void*>(p));
  return r;
}

// (results, info): each result a uint8 array, or None where it is aliased
// (the caller's own array holds it), and a dict of where and how it ran.
nb::tuple ToPython(CallResult result) {
  nb::list out;
  for (ResultTensor& t : result.results) {
    if (t.resident.has_value()) {
      out.append(nb::str(t.resident->handle.c_str()));  // farcall.Resident in Python
    } else if (t.aliased) {
      out.append(nb::none());
    } else if (t.storage != nullptr) {
      uint8_t* data = t.data;
      out.append(OwnedBytes(data, t.size, std::move(t.storage)));
    } else if (t.keepalive != nullptr) {
      out.append(OwnedBytes(t.data, t.size, std::move(t.keepalive)));
    } else {
      out.append(nb::none());  // written into result_memory
    }
  }
  nb::dict info;
  info["agent_id"] = result.agent_id;
  info["platform"] = result.platform;
  info["transport"] = TransportName(result.transport);
  info["rpc"] = RpcName(result.rpc);
  info["via_router"] = result.via_router;
  info["queue_seconds"] = absl::ToDoubleSeconds(result.queue_time);
  info["transfer_seconds"] = absl::ToDoubleSeconds(result.transfer_time);
  info["execute_seconds"] = absl::ToDoubleSeconds(result.execute_time);
  return nb::make_tuple(out, info);
}

nb::dict AgentInfoToDict(const AgentDescription& a) {
  nb::dict d;
  d["agent_id"] = a.agent_id;
  d["platform"] = a.platform;
  d["version"] = a.version;
  nb::list devices, handlers;
  for (const auto& dev : a.devices) {
    nb::dict x;
    x["ordinal"] = dev.ordinal;
    x["name"] = dev.name;
    x["memory_bytes"] = dev.memory_bytes;
    devices.append(x);
  }
  for (const auto& h : a.handlers) {
    nb::dict x;
    x["name"] = h.name;
    x["command_buffer_compatible"] = h.command_buffer_compatible;
    x["source"] = h.source;
    handlers.append(x);
  }
  d["devices"] = devices;
  d["handlers"] = handlers;
  d["max_call_bytes"] = a.max_call_bytes;
  d["shm_socket"] = a.shm_socket;
  d["offers_ucx"] = a.offers_ucx;
  d["calls_total"] = a.calls_total;
  d["failed_calls_total"] = a.failed_calls_total;
  d["inflight_calls"] = a.inflight_calls;
  d["resident_count"] = a.resident_count;
  d["resident_bytes"] = a.resident_bytes;
  return d;
}

// Completes call_async calls on one thread of farcall's own, never on
// gRPC's: a user's Future callback may block, and taking the GIL on a gRPC
// thread would stall its poller for every other call. At exit, Drain()
// waits for the calls in flight, then stops touching Python, which a thread
// must not do once the interpreter is finalizing.
class PythonCompletions {
 public:
  static PythonCompletions& Get() {
    static auto* c = new PythonCompletions();  // lives as long as the process
    return *c;
  }

  // A call_async call began; its completion will be posted.
  void Begin() {
    absl::MutexLock l(&mu_);
    ++inflight_;
    if (!started_) {
      started_ = true;
      std::thread([this] { Loop(); }).detach();
    }
  }

  // `run` runs with the GIL; `drop` instead, without it, once closed. Each
  // must let go of every Python object it holds.
  void Post(std::function<void()> run, std::function<void()> drop) {
    absl::MutexLock l(&mu_);
    queue_.push_back({std::move(run), std::move(drop)});
  }

  // Waits up to `timeout` for the calls in flight; returns whether all
  // completed. Called with the GIL (atexit).
  bool Drain(double timeout) {
    nb::gil_scoped_release release;
    absl::MutexLock l(&mu_);
    auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return inflight_ == 0; };
    const bool done = mu_.AwaitWithTimeout(absl::Condition(&idle), absl::Seconds(timeout));
    closed_ = true;
    auto not_running = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !running_; };
    mu_.AwaitWithTimeout(absl::Condition(&not_running), absl::Seconds(timeout));
    return done;
  }

 private:
  struct Item {
    std::function<void()> run, drop;
  };

  void Loop() {
    for (;;) {
      Item item;
      {
        absl::MutexLock l(&mu_);
        auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !queue_.empty(); };
        mu_.Await(absl::Condition(&ready));
        item = std::move(queue_.front());
        queue_.pop_front();
        if (closed_) {
          item.drop();
          --inflight_;
          continue;
        }
        running_ = true;
      }
      {
        nb::gil_scoped_acquire gil;
        item.run();
      }
      absl::MutexLock l(&mu_);
      running_ = false;
      --inflight_;
    }
  }

  absl::Mutex mu_;
  std::deque<Item> queue_ ABSL_GUARDED_BY(mu_);
  int inflight_ ABSL_GUARDED_BY(mu_) = 0;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  bool running_ ABSL_GUARDED_BY(mu_) = false;
};

// Runs `f` (a client call) without the GIL; its value, or its failure
// raised as farcall.Error.
template <typename F>
auto WithoutGil(F f) {
  decltype(f()) r;
  {
    nb::gil_scoped_release release;
    r = f();
  }
  if constexpr (std::is_same_v<decltype(r), absl::Status>) {
    if (!r.ok()) RaiseStatus(r);
  } else {
    if (!r.ok()) RaiseStatus(r.status());
    return *std::move(r);
  }
}

class PyClient {
 public:
  PyClient(const std::string& target, const ClientOptions& options)
      : client_(WithoutGil([&] { return Client::Connect(target, options); })) {}

  nb::tuple Call(const std::string& handler, const std::vector<std::string>& platforms,
                 const std::vector<ArgTuple>& args, const std::vector<SpecTuple>& results,
                 const std::map<uint32_t, uint32_t>& aliases, const nb::dict& attributes,
                 bool has_side_effect, const CallOptions& options,
                 const std::vector<uintptr_t>& result_memory, const nb::dict& resident) {
    const CallRequest request = BuildRequest(handler, platforms, args, results, aliases, attributes,
                                             has_side_effect, result_memory, resident);
    return ToPython(WithoutGil([&] { return client_->Call(request, options); }));
  }

  // `done(results_and_info, code, message, traceback, did_not_run,
  // from_handler)` runs once, holding the GIL, on
  // farcall's completion thread; `done` (and the caller's arrays it keeps)
  // is held until then.
  void CallAsync(const std::string& handler, const std::vector<std::string>& platforms,
                 const std::vector<ArgTuple>& args, const std::vector<SpecTuple>& results,
                 const std::map<uint32_t, uint32_t>& aliases, const nb::dict& attributes,
                 bool has_side_effect, const CallOptions& options, nb::object done,
                 const nb::dict& resident) {
    const CallRequest request = BuildRequest(handler, platforms, args, results, aliases, attributes,
                                             has_side_effect, {}, resident);
    // Dropped only with the GIL (run), or leaked once Python is going away
    // (drop): never released on a gRPC thread.
    auto fn = std::make_shared<nb::object>(std::move(done));
    PythonCompletions::Get().Begin();
    nb::gil_scoped_release release;
    client_->CallAsync(request, options, [fn](absl::StatusOr<CallResult> r) {
      auto result = std::make_shared<absl::StatusOr<CallResult>>(std::move(r));
      PythonCompletions::Get().Post(
          [fn, result] {
            try {
              if (result->ok()) {
                (*fn)(ToPython(std::move(**result)), nb::none(), nb::none(), "", false, false,
                      false);
              } else {
                const absl::Status& s = result->status();
                (*fn)(nb::none(), CodeName(s.code()), std::string(s.message()), TracebackOf(s),
                      DidNotRun(s), ReasonOf(s) == ErrorReason::kHandlerError,
                      ReasonOf(s) == ErrorReason::kResidentLost);
              }
            } catch (nb::python_error& e) {
              e.restore();
              PyErr_WriteUnraisable(fn->ptr());
            } catch (const std::exception& e) {
              PyErr_SetString(PyExc_RuntimeError, e.what());
              PyErr_WriteUnraisable(fn->ptr());
            }
            fn->reset();
          },
          [fn] { fn->release(); });
    });
  }

  void Close() {
    nb::gil_scoped_release release;
    client_->Close();
  }

  nb::object AllocateShared(size_t bytes) {
    SharedBuffer b = WithoutGil([&] { return client_->AllocateShared(bytes); });
    uint8_t* data = b.data();
    return OwnedBytes(data, static_cast<int64_t>(bytes), std::move(b));
  }

  nb::dict Describe(double timeout) {
    return AgentInfoToDict(WithoutGil([&] { return client_->Describe(absl::Seconds(timeout)); }));
  }

  nb::list Agents(bool refresh, double timeout) {
    const std::vector<AgentStatus> agents =
        WithoutGil([&] { return client_->ListAgents(refresh, absl::Seconds(timeout)); });
    nb::list out;
    for (const AgentStatus& e : agents) {
      nb::dict d;
      d["address"] = e.address;
      d["info"] = AgentInfoToDict(e.info);
      d["health"] = HealthName(e.health);
      d["inflight_calls"] = e.inflight_calls;
      d["last_error"] = e.last_error;
      d["calls_total"] = e.calls_total;
      out.append(d);
    }
    return out;
  }

  void Health(double timeout) {
    WithoutGil([&] { return client_->Health(absl::Seconds(timeout)); });
  }

 private:
  std::unique_ptr<Client> client_;
};

// A transport or RPC shape by its name; ValueError naming the choices.
template <typename T>
T Named(std::optional<T> (*named)(std::string_view), const char* what, const std::string& name,
        const char* choices) {
  std::optional<T> v = named(name);
  if (!v)
    throw nb::value_error(absl::StrCat(what, " must be ", choices, "; got '", name, "'").c_str());
  return *v;
}

void DefineOptions(nb::module_& m) {
  // farcall::ClientOptions: how a client reaches its target.
  nb::class_<ClientOptions>(m, "ClientOptions")
      .def(nb::init<>())
      .def_rw("tls_ca", &ClientOptions::tls_ca)
      .def_rw("tls_cert", &ClientOptions::tls_cert)
      .def_rw("tls_key", &ClientOptions::tls_key)
      .def_rw("token", &ClientOptions::token)
      .def_rw("allow_insecure_tokens", &ClientOptions::allow_insecure_tokens)
      .def_rw("tls_server_name", &ClientOptions::tls_server_name)
      .def_rw("agent_tls_server_name", &ClientOptions::agent_tls_server_name)
      .def_rw("ucx_transports", &ClientOptions::ucx_transports);
  // farcall::CallOptions: how one call goes. Durations in seconds;
  // transport and rpc by name.
  nb::class_<CallOptions>(m, "CallOptions")
      .def(nb::init<>())
      .def_prop_rw(
          "timeout", [](const CallOptions& o) { return absl::ToDoubleSeconds(o.timeout); },
          [](CallOptions& o, double seconds) {
            if (!(seconds >= 0)) {
              throw nb::value_error(
                  absl::StrCat("timeout must be 0 or more seconds; got ", seconds).c_str());
            }
            o.timeout = absl::Seconds(seconds);
          })
      .def_prop_rw(
          "transport", [](const CallOptions& o) { return std::string(TransportName(o.transport)); },
          [](CallOptions& o, const std::string& name) {
            o.transport = Named<Transport>(&TransportNamed, "transport", name,
                                           "'auto', 'grpc', 'shm' or 'ucx'");
          })
      .def_prop_rw(
          "rpc", [](const CallOptions& o) { return std::string(RpcName(o.rpc)); },
          [](CallOptions& o, const std::string& name) {
            o.rpc = Named<Rpc>(&RpcNamed, "rpc", name, "'auto', 'unary' or 'stream'");
          })
      .def_prop_rw(
          "busy_poll", [](const CallOptions& o) { return absl::ToDoubleSeconds(o.busy_poll); },
          [](CallOptions& o, double seconds) {
            if (!(seconds >= 0 && seconds <= 1)) {
              throw nb::value_error(
                  absl::StrCat("busy_poll must be 0 to 1 seconds; got ", seconds).c_str());
            }
            o.busy_poll = absl::Seconds(seconds);
          })
      .def_rw("chunk_bytes", &CallOptions::chunk_bytes)
      .def_rw("call_id", &CallOptions::call_id)
      .def_rw("allow_shm", &CallOptions::allow_shm)
      .def_rw("shm_min_bytes", &CallOptions::shm_min_bytes)
      .def_rw("ucx_min_bytes", &CallOptions::ucx_min_bytes)
      .def_rw("wait_for_ready", &CallOptions::wait_for_ready)
      .def_rw("validate_locally", &CallOptions::validate_locally)
      .def_rw("via_router", &CallOptions::via_router)
      .def_rw("retries", &CallOptions::retries)
      .def_rw("keep_aliased_args", &CallOptions::keep_aliased_args)
      .def_rw("stop", &CallOptions::stop, nb::for_setter(nb::arg("value").none()));
}

}  // namespace

void DefineClient(nb::module_& m) {
  // farcall::CallStop: stops the asynchronous calls given it.
  nb::class_<CallStop>(m, "CallStop")
      .def(nb::init<>())
      .def("stop", &CallStop::Stop, nb::call_guard<nb::gil_scoped_release>())
      .def_prop_ro("stopped", &CallStop::stopped);
  DefineOptions(m);
  nb::class_<PyClient>(m, "Client")
      .def(nb::init<const std::string&, const ClientOptions&>(), nb::arg("target"),
           nb::arg("options"))
      .def("call", &PyClient::Call, nb::arg("handler"), nb::arg("platforms"), nb::arg("args"),
           nb::arg("results"), nb::arg("aliases"), nb::arg("attributes"),
           nb::arg("has_side_effect"), nb::arg("options"), nb::arg("result_memory"),
           nb::arg("resident") = nb::dict())
      .def("call_async", &PyClient::CallAsync, nb::arg("handler"), nb::arg("platforms"),
           nb::arg("args"), nb::arg("results"), nb::arg("aliases"), nb::arg("attributes"),
           nb::arg("has_side_effect"), nb::arg("options"), nb::arg("done"),
           nb::arg("resident") = nb::dict())
      .def("close", &PyClient::Close)
      .def("allocate_shared", &PyClient::AllocateShared, nb::arg("nbytes"))
      .def("describe", &PyClient::Describe, nb::arg("timeout"))
      .def("agents", &PyClient::Agents, nb::arg("refresh"), nb::arg("timeout"))
      .def("health", &PyClient::Health, nb::arg("timeout"));
  m.def(
      "_drain_completions", [](double timeout) { return PythonCompletions::Get().Drain(timeout); },
      nb::arg("timeout"));
}

}  // namespace farcall::python
