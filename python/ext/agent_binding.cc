// farcall._farcall.start_agent: an agent in this process that serves the
// built-ins, plugins and Python handlers. Python handlers run on their own
// threads (a WorkerPool of --python_threads), which take the GIL to call
// farcall.agent's dispatcher; native handlers never wait for Python.
#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "core/dtype.h"
#include "core/error_reason.h"
#include "core/log.h"
#include "core/metrics.h"
#include "core/security_flags.h"
#include "device_agents/agent_flags.h"
#include "device_agents/agent_service.h"
#include "device_agents/worker_pool.h"
#include "nanobind/ndarray.h"
#include "nanobind/stl/string.h"
#include "nanobind/stl/tuple.h"
#include "nanobind/stl/unique_ptr.h"
#include "nanobind/stl/vector.h"
#include "python/ext/extension.h"

namespace nb = nanobind;

namespace farcall::python {
namespace {

using agent::AgentServer;
using agent::CancellationToken;
using agent::HandlerInvocation;

// A Python object that may be dropped from any thread.
struct HeldObject {
  nb::object obj;
  ~HeldObject() {
    if (!PythonAlive()) {
      obj.release();
      return;
    }
    nb::gil_scoped_acquire gil;
    obj.reset();
  }
};

// ctx.cancelled() of one call: whether the call was cancelled or its
// deadline passed; true once the call has ended.
struct CallCancel {
  const CancellationToken* token = nullptr;  // null once the call ended
  bool cancelled() const { return token == nullptr || token->cancelled(); }
};

// `t` as a time.monotonic() value (CLOCK_MONOTONIC, as steady_clock).
double MonotonicSeconds(absl::Time t) {
  const double now =
      std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  return now + absl::ToDoubleSeconds(t - absl::Now());
}

// A Python handle on the memory of a handler's buffer (farcall.agent.Buffer
// keeps it): while any view of the buffer lives, so does the memory, and the
// agent gives it to no other call.
struct MemoryLease {
  std::shared_ptr<void> owner;
};

nb::tuple BufferTuple(const FarcallBuffer& b, const std::vector<std::shared_ptr<void>>& owners,
                      size_t i) {
  nb::list dims;
  for (int64_t d = 0; d < b.rank; ++d) dims.append(b.dims[d]);
  nb::object lease = nb::none();
  if (i < owners.size() && owners[i] != nullptr) lease = nb::cast(MemoryLease{owners[i]});
  return nb::make_tuple(reinterpret_cast<uintptr_t>(b.data), b.dtype, nb::tuple(dims), b.size_bytes,
                        lease);
}

// Calls dispatch(fn, ctx, results, args) with the GIL; it returns None, or
// (code, message) for a failed call.
absl::Status CallPython(const HeldObject& dispatch, const HeldObject& fn,
                        const HandlerInvocation& inv) {
  if (!PythonAlive()) return absl::UnavailableError("the Python interpreter is shutting down.");
  nb::gil_scoped_acquire gil;
  try {
    nb::list results, args;
    for (size_t i = 0; i < inv.results.size(); ++i) {
      results.append(BufferTuple(inv.results[i], inv.result_owners, i));
    }
    for (size_t i = 0; i < inv.args.size(); ++i) {
      args.append(BufferTuple(inv.args[i], inv.arg_owners, i));
    }
    nb::dict ctx;
    nb::dict attributes;
    for (const FarcallAttribute& a : inv.attrs) {
      nb::str name(a.name, a.name_size);
      switch (a.type) {
        case FARCALL_ATTR_I64:
          attributes[name] = nb::int_(a.i64);
          break;
        case FARCALL_ATTR_F64:
          attributes[name] = nb::float_(a.f64);
          break;
        case FARCALL_ATTR_BOOL:
          attributes[name] = nb::bool_(a.b != 0);
          break;
        case FARCALL_ATTR_STR:
          attributes[name] = nb::str(a.str, a.str_size);
          break;
        default:
          break;
      }
    }
    ctx["attributes"] = attributes;
    ctx["platform"] = inv.platform;
    ctx["device_ordinal"] = inv.device_ordinal;
    ctx["stream"] = reinterpret_cast<uintptr_t>(inv.stream);
    const absl::Time deadline =
        inv.cancel != nullptr ? inv.cancel->deadline() : absl::InfiniteFuture();
    ctx["deadline"] =
        deadline == absl::InfiniteFuture() ? nb::none() : nb::cast(MonotonicSeconds(deadline));
    nb::object cancel = nb::cast(CallCancel{inv.cancel});
    ctx["cancel"] = cancel;
    struct EndCancel {  // whichever way the dispatch ends
      nb::object& c;
      ~EndCancel() { nb::cast<CallCancel&>(c).token = nullptr; }
    } end{cancel};
    nb::object out = dispatch.obj(fn.obj, ctx, results, args);
    if (out.is_none()) return absl::OkStatus();
    auto [code, message, traceback] = nb::cast<std::tuple<int, std::string, std::string>>(out);
    if (code <= 0 || code > 16) code = static_cast<int>(absl::StatusCode::kInternal);
    return WithTraceback(absl::Status(static_cast<absl::StatusCode>(code), message), traceback);
  } catch (nb::python_error& e) {
    // The dispatcher turns a handler's exceptions into (code, message), so
    // this is farcall's own bug or an interrupt.
    return absl::InternalError(absl::StrCat("Python handler dispatch failed: ", e.what()));
  } catch (const std::exception& e) {
    // No exception may reach the agent's worker threads.
    return absl::InternalError(absl::StrCat("Python handler dispatch failed: ", e.what()));
  }
}

class PyAgent {
 public:
  PyAgent(std::unique_ptr<AgentServer> server, ReloadableFiles files)
      : server_(std::move(server)), files_(std::move(files)) {}
  ~PyAgent() { Shutdown(); }

  int port() const { return server_ ? server_->port() : 0; }
  std::string agent_id() const { return server_ ? server_->state().agent_id() : ""; }
  // Reloads what may change without a restart (the tokens and TLS files):
  // at SIGHUP (`force`), and every couple of seconds in case they changed.
  void ReloadConfig(bool force) {
    nb::gil_scoped_release release;
    ReloadFiles(files_, force);
  }
  void Shutdown() {
    if (server_ == nullptr) return;
    std::unique_ptr<AgentServer> s = std::move(server_);
    nb::gil_scoped_release release;  // handler threads may wait for the GIL
    s->Shutdown();
    s.reset();
  }

 private:
  std::unique_ptr<AgentServer> server_;
  ReloadableFiles files_;  // shares its tokens and TLS files with the server's
};

// Parses `argv` as farcall-agent's flags and starts serving. Returns the
// agent, or an exit code (--list_devices, bad flags, failed start).
nb::object StartAgent(std::vector<std::string> argv,
                      std::vector<std::tuple<std::string, nb::object>> handlers,
                      nb::object dispatch, int python_threads, int python_max_threads,
                      const std::string& source) {
  static bool parsed = false;
  if (parsed) {
    RaiseStatus(absl::FailedPreconditionError("an agent was already started in this process."));
  }
  parsed = true;
  std::vector<char*> cargv;
  for (std::string& a : argv) cargv.push_back(a.data());
  log::SetUpHelp(agent::kAgentUsage);
  absl::ParseCommandLine(static_cast<int>(cargv.size()), cargv.data());
  if (absl::Status s = log::InitFromFlags("farcall-agent"); !s.ok()) {
    std::fprintf(stderr, "farcall-agent: %s\n", s.ToString().c_str());
    return nb::int_(2);
  }
  absl::StatusOr<AgentServer::Options> options = agent::AgentOptionsFromFlags();
  if (!options.ok()) {
    log::Error(options.status().ToString());
    return nb::int_(2);
  }
  if (std::optional<int> code = agent::ListDevicesIfAsked(*options)) return nb::int_(*code);

  // Handlers still running past their call's deadline ("stuck") count no
  // more against --python_threads: the pool starts others, up to
  // --python_max_threads, so that the calls behind them are served.
  static metrics::GaugeFamily* stuck_family =
      new metrics::GaugeFamily("farcall_agent_python_stuck_handlers",
                               "Python handlers still running past their call's deadline.", {});
  metrics::Gauge stuck = stuck_family->With({});
  stuck.Set(0);
  // Tenants share the threads as the agent's workers are shared: the one
  // holding the fewest goes next, and a tenant holding none while others
  // hold them all gets a spare (--tenant_spare_workers, by default as many
  // as --python_threads).
  const int threads = python_threads > 0 ? python_threads : 1;
  const int spares = options->tenant_spare_workers < 0 ? threads : options->tenant_spare_workers;
  auto pool = std::make_shared<agent::WorkerPool>(
      threads, python_max_threads, [stuck](int n) mutable { stuck.Set(n); }, spares);
  auto held_dispatch = std::make_shared<HeldObject>();
  held_dispatch->obj = std::move(dispatch);
  const std::string platform(PlatformName(options->config.platform));
  for (auto& [name, fn] : handlers) {
    auto held_fn = std::make_shared<HeldObject>();
    held_fn->obj = std::move(fn);
    agent::RegisteredHandler h;
    h.name = name;
    h.platform = platform;
    h.source = source;
    h.pool = pool;
    h.invoke = [held_dispatch, held_fn](const HandlerInvocation& inv) {
      return CallPython(*held_dispatch, *held_fn, inv);
    };
    options->in_process_handlers.push_back(std::move(h));
  }
  ReloadableFiles files{options->tokens, options->tls_files,     std::nullopt, options->verifier,
                        nullptr,         options->metrics_tokens};
  ExportReloadMetrics();
  absl::StatusOr<std::unique_ptr<AgentServer>> server;
  {
    nb::gil_scoped_release release;
    server = AgentServer::Start(*std::move(options));
  }
  if (!server.ok()) {
    log::Error(server.status().ToString());
    return nb::int_(1);
  }
  agent::AnnounceServing(**server);
  files.serves = agent::ServesHandler(**server);
  WarnOfUnservedHandlers(files.tokens, files.serves);
  return nb::cast(std::make_unique<PyAgent>(*std::move(server), files));
}

// DLPack's code for a wire dtype; false for none.
bool DlpackDType(int dtype, nb::dlpack::dtype* out) {
  using C = nb::dlpack::dtype_code;
  auto set = [&](C code, int bits) {
    *out = nb::dlpack::dtype{static_cast<uint8_t>(code), static_cast<uint8_t>(bits), 1};
    return true;
  };
  switch (static_cast<DType>(dtype)) {
    case DType::kPred:
      return set(C::Bool, 8);
    case DType::kS8:
      return set(C::Int, 8);
    case DType::kS16:
      return set(C::Int, 16);
    case DType::kS32:
      return set(C::Int, 32);
    case DType::kS64:
      return set(C::Int, 64);
    case DType::kU8:
      return set(C::UInt, 8);
    case DType::kU16:
      return set(C::UInt, 16);
    case DType::kU32:
      return set(C::UInt, 32);
    case DType::kU64:
      return set(C::UInt, 64);
    case DType::kF16:
      return set(C::Float, 16);
    case DType::kF32:
      return set(C::Float, 32);
    case DType::kF64:
      return set(C::Float, 64);
    case DType::kBF16:
      return set(C::Bfloat, 16);
    case DType::kC64:
      return set(C::Complex, 64);
    case DType::kC128:
      return set(C::Complex, 128);
    case DType::kF8E5M2:
      return set(C::Float8_E5M2, 8);
    case DType::kF8E4M3FN:
      return set(C::Float8_E4M3FN, 8);
    case DType::kF8E4M3B11FNUZ:
      return set(C::Float8_E4M3B11FNUZ, 8);
    case DType::kF8E5M2FNUZ:
      return set(C::Float8_E5M2FNUZ, 8);
    case DType::kF8E4M3FNUZ:
      return set(C::Float8_E4M3FNUZ, 8);
    default:
      return false;
  }
}

// An object with __dlpack__ over a handler's buffer; `owner` (the Buffer)
// stays alive as long as it does.
nb::object DlpackView(uintptr_t ptr, std::vector<size_t> shape, int dtype, bool readonly,
                      int device_type, int device_id, nb::handle owner) {
  nb::dlpack::dtype dt;
  if (!DlpackDType(dtype, &dt)) {
    PyErr_SetString(PyExc_BufferError, "this dtype has no DLPack code.");
    throw nb::python_error();
  }
  if (readonly) {
    return nb::cast(nb::ndarray<nb::array_api, nb::ro>(reinterpret_cast<const void*>(ptr),
                                                       shape.size(), shape.data(), owner, nullptr,
                                                       dt, device_type, device_id));
  }
  return nb::cast(nb::ndarray<nb::array_api>(reinterpret_cast<void*>(ptr), shape.size(),
                                             shape.data(), owner, nullptr, dt, device_type,
                                             device_id));
}

}  // namespace

void DefineAgent(nb::module_& m) {
  m.def("dlpack_view", &DlpackView, nb::arg("ptr"), nb::arg("shape"), nb::arg("dtype"),
        nb::arg("readonly"), nb::arg("device_type"), nb::arg("device_id"), nb::arg("owner"));
  nb::class_<MemoryLease>(m, "MemoryLease");
  nb::class_<CallCancel>(m, "CallCancel").def("cancelled", &CallCancel::cancelled);
  nb::class_<PyAgent>(m, "Agent")
      .def_prop_ro("port", &PyAgent::port)
      .def_prop_ro("agent_id", &PyAgent::agent_id)
      .def("reload_config", &PyAgent::ReloadConfig, nb::arg("force"))
      .def("shutdown", &PyAgent::Shutdown);
  m.def("start_agent", &StartAgent, nb::arg("argv"), nb::arg("handlers"), nb::arg("dispatch"),
        nb::arg("python_threads"), nb::arg("python_max_threads"), nb::arg("source"));
}

}  // namespace farcall::python
