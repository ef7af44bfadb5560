// The XLA FFI handler behind farcall.jax.buffer_callback on the CPU backend:
// XLA's own buffers go to the agent through the C++ client, with no Python
// and no GIL on the path. Built only when jaxlib's FFI headers were found.
//
// Attributes (set by farcall/jax.py): target, handler, platform; aliases as
// "IN:OUT,..."; the call's attributes encoded by farcall.jax._encode_attrs;
// timeout in seconds; has_side_effect.
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "farcall/client.h"
#include "python/ext/extension.h"
#include "xla/ffi/api/ffi.h"

namespace nb = nanobind;
namespace ffi = xla::ffi;

namespace farcall::python {
namespace {

// One client per target for the life of the process: XLA calls the handler
// from many threads, and clients share channels anyway.
Client* ClientFor(std::string_view target, absl::Status* error) {
  static absl::Mutex mu(absl::kConstInit);
  static auto* clients = new std::map<std::string, std::unique_ptr<Client>, std::less<>>();
  absl::MutexLock l(&mu);
  auto it = clients->find(target);
  if (it != clients->end()) return it->second.get();
  absl::StatusOr<std::unique_ptr<Client>> c = Client::Connect(std::string(target));
  if (!c.ok()) {
    *error = c.status();
    return nullptr;
  }
  return clients->emplace(std::string(target), *std::move(c)).first->second.get();
}

// Abseil 20220623 has its own string_view.
absl::string_view Absl(std::string_view s) { return absl::string_view(s.data(), s.size()); }

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

// Entries of one type letter (i, f, b, s) and two counted strings each:
// name and value. Python writes floats with repr(), which round-trips.
absl::Status DecodeAttributes(absl::string_view in,
                              std::map<std::string, AttributeValue>* out) {
  while (!in.empty()) {
    char type = in.front();
    in.remove_prefix(1);
    absl::string_view name, value;
    if (!TakeCounted(in, &name) || !TakeCounted(in, &value)) {
      return absl::InvalidArgumentError("farcall: malformed attribute encoding.");
    }
    std::string key(name);
    switch (type) {
      case 'i': {
        int64_t v = 0;
        if (!absl::SimpleAtoi(value, &v)) return absl::InvalidArgumentError("bad i64 attribute");
        (*out)[key] = v;
        break;
      }
      case 'f':
        (*out)[key] = std::strtod(std::string(value).c_str(), nullptr);
        break;
      case 'b':
        (*out)[key] = value == "1";
        break;
      case 's':
        (*out)[key] = std::string(value);
        break;
      default:
        return absl::InvalidArgumentError("farcall: unknown attribute type.");
    }
  }
  return absl::OkStatus();
}

ffi::Error ToFfiError(const absl::Status& s) {
  // JAX's runtime error puts the code's name in front: "NOT_FOUND: ...".
  return ffi::Error(static_cast<ffi::ErrorCode>(s.code()), std::string(s.message()));
}

TensorSpec SpecOf(const ffi::AnyBuffer& b) {
  TensorSpec spec;
  // XLA's PrimitiveType numbers are the wire's DType numbers.
  spec.dtype = static_cast<DType>(b.element_type());
  auto dims = b.dimensions();
  spec.dims.assign(dims.begin(), dims.end());
  return spec;
}

ffi::Error Call(ffi::RemainingArgs args, ffi::RemainingRets rets, std::string_view target,
                std::string_view handler, std::string_view platform,
                std::string_view aliases, std::string_view attributes, double timeout,
                bool has_side_effect) {
  CallRequest req;
  req.handler = std::string(handler);
  req.platform = std::string(platform);
  req.has_side_effect = has_side_effect;
  for (absl::string_view pair : absl::StrSplit(Absl(aliases), ',', absl::SkipEmpty())) {
    std::pair<absl::string_view, absl::string_view> io = absl::StrSplit(pair, ':');
    uint32_t i = 0, o = 0;
    if (!absl::SimpleAtoi(io.first, &i) || !absl::SimpleAtoi(io.second, &o)) {
      return ffi::Error::InvalidArgument("farcall: malformed aliases attribute.");
    }
    req.aliases[i] = o;
  }
  if (absl::Status s = DecodeAttributes(Absl(attributes), &req.attributes); !s.ok()) {
    return ToFfiError(s);
  }
  std::vector<ffi::AnyBuffer> in, out;
  for (size_t i = 0; i < args.size(); ++i) {
    ffi::ErrorOr<ffi::AnyBuffer> b = args.get<ffi::AnyBuffer>(i);
    if (!b.has_value()) return b.error();
    in.push_back(*b);
  }
  for (size_t o = 0; o < rets.size(); ++o) {
    ffi::ErrorOr<ffi::Result<ffi::AnyBuffer>> b = rets.get<ffi::AnyBuffer>(o);
    if (!b.has_value()) return b.error();
    out.push_back(**b);
  }
  std::map<uint32_t, uint32_t> aliased_output;  // input -> output
  for (const auto& [i, o] : req.aliases) {
    if (i < in.size() && o < out.size()) aliased_output[i] = o;
  }
  for (size_t i = 0; i < in.size(); ++i) {
    auto a = aliased_output.find(static_cast<uint32_t>(i));
    if (a == aliased_output.end()) {
      req.args.push_back(Arg::In(SpecOf(in[i]), in[i].untyped_data()));
      continue;
    }
    // XLA gives an aliased operand and its result one buffer; should it
    // ever not, the result starts as a copy of the input.
    ffi::AnyBuffer& dst = out[a->second];
    if (dst.untyped_data() != in[i].untyped_data()) {
      std::memcpy(dst.untyped_data(), in[i].untyped_data(), in[i].size_bytes());
    }
    req.args.push_back(Arg::InOut(SpecOf(in[i]), dst.untyped_data()));
  }
  for (ffi::AnyBuffer& r : out) {
    req.results.push_back(SpecOf(r));
    req.result_memory.push_back(r.untyped_data());  // written in place
  }
  absl::Status error;
  Client* client = ClientFor(target, &error);
  if (client == nullptr) return ToFfiError(error);
  CallOptions options;
  options.timeout = absl::Seconds(timeout);
  absl::StatusOr<CallResult> r = client->Call(req, options);
  if (!r.ok()) return ToFfiError(r.status());
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(FarcallXlaCall, Call,
                              ffi::Ffi::Bind()
                                  .RemainingArgs()
                                  .RemainingRets()
                                  .Attr<std::string_view>("target")
                                  .Attr<std::string_view>("handler")
                                  .Attr<std::string_view>("platform")
                                  .Attr<std::string_view>("aliases")
                                  .Attr<std::string_view>("attributes")
                                  .Attr<double>("timeout")
                                  .Attr<bool>("has_side_effect"));

void DefineFfi(nb::module_& m) {
  m.def("ffi_handlers", [] {
    nb::dict d;
    d["cpu"] = nb::capsule(reinterpret_cast<void*>(&FarcallXlaCall), "xla._CUSTOM_CALL_TARGET");
    return d;
  });
}

}  // namespace farcall::python
