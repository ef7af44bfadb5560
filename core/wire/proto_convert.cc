#include "core/wire/proto_convert.h"

namespace farcall {

// The wire's dtype numbers are the C ABI's (and so DType's, which takes
// them from it): the casts below change no value.
// Compared as ints: the two are enums of different types (-Wenum-compare).
#define FARCALL_SAME_DTYPE(name) \
  static_assert(static_cast<int>(v1::name) == static_cast<int>(FARCALL_DTYPE_##name))
static_assert(static_cast<int>(v1::DTYPE_INVALID) == static_cast<int>(FARCALL_DTYPE_INVALID));
FARCALL_SAME_DTYPE(PRED);
FARCALL_SAME_DTYPE(S8);
FARCALL_SAME_DTYPE(S16);
FARCALL_SAME_DTYPE(S32);
FARCALL_SAME_DTYPE(S64);
FARCALL_SAME_DTYPE(U8);
FARCALL_SAME_DTYPE(U16);
FARCALL_SAME_DTYPE(U32);
FARCALL_SAME_DTYPE(U64);
FARCALL_SAME_DTYPE(F16);
FARCALL_SAME_DTYPE(F32);
FARCALL_SAME_DTYPE(F64);
FARCALL_SAME_DTYPE(C64);
FARCALL_SAME_DTYPE(BF16);
FARCALL_SAME_DTYPE(C128);
FARCALL_SAME_DTYPE(F8E5M2);
FARCALL_SAME_DTYPE(F8E4M3FN);
FARCALL_SAME_DTYPE(F8E4M3B11FNUZ);
FARCALL_SAME_DTYPE(F8E5M2FNUZ);
FARCALL_SAME_DTYPE(F8E4M3FNUZ);
#undef FARCALL_SAME_DTYPE

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
