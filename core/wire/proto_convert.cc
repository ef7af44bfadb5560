#include "core/wire/proto_convert.h"

namespace farcall {

TensorSpec SpecFromProto(const v1::TensorSpec& p) {
  TensorSpec s;
  s.dtype = static_cast<DType>(p.dtype());
  s.dims.assign(p.dims().begin(), p.dims().end());
  return s;
}

v1::TensorSpec SpecToProto(const TensorSpec& s) {
  v1::TensorSpec p;
  p.set_dtype(static_cast<v1::DType>(s.dtype));
  for (int64_t d : s.dims) p.add_dims(d);
  return p;
}

CallDescriptor DescriptorFromProto(const v1::CallHeader& h) {
  CallDescriptor d;
  d.handler = h.handler();
  d.platforms.assign(h.platforms().begin(), h.platforms().end());
  for (const auto& a : h.args()) d.args.push_back(SpecFromProto(a));
  for (const auto& r : h.results()) d.results.push_back(SpecFromProto(r));
  for (const auto& [i, o] : h.input_output_aliases()) d.aliases[i] = o;
  return d;
}

}  // namespace farcall
