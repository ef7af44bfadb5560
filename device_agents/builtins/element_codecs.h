// How each float dtype is stored (T) and computed in (C), for the built-in
// kernels of every platform: the narrow types compute in float and round
// once, on store, through core/float_formats.h. Usable in CUDA and HIP
// device code; keyed by FarcallDType numbers so that kernels need no farcall
// library type.
//
//   VisitFloatCodec(FARCALL_DTYPE_BF16, [&](auto codec) {
//     using K = decltype(codec);  // K::T is uint16_t, K::C is float
//   });
#ifndef FARCALL_DEVICE_AGENTS_BUILTINS_ELEMENT_CODECS_H_
#define FARCALL_DEVICE_AGENTS_BUILTINS_ELEMENT_CODECS_H_

#include <cstdint>

#include "core/float_formats.h"
#include "farcall/handler_api.h"

namespace farcall::agent::builtins {

struct F32Codec {
  using T = float;
  using C = float;
  FARCALL_HD static C Load(T v) { return v; }
  FARCALL_HD static T Store(C v) { return v; }
};
struct F64Codec {
  using T = double;
  using C = double;
  FARCALL_HD static C Load(T v) { return v; }
  FARCALL_HD static T Store(C v) { return v; }
};
struct F16Codec {
  using T = uint16_t;
  using C = float;
  FARCALL_HD static C Load(T v) { return HalfToFloat(v); }
  FARCALL_HD static T Store(C v) { return FloatToHalf(v); }
};
struct BF16Codec {
  using T = uint16_t;
  using C = float;
  FARCALL_HD static C Load(T v) { return BF16ToFloat(v); }
  FARCALL_HD static T Store(C v) { return FloatToBF16(v); }
};

constexpr float_types_internal::MiniFormat F8FormatOf(int32_t dtype) {
  using namespace float_types_internal;  // NOLINT: the format constants
  switch (dtype) {
    case FARCALL_DTYPE_F8E5M2:
      return kF8E5M2Format;
    case FARCALL_DTYPE_F8E4M3B11FNUZ:
      return kF8E4M3B11FNUZFormat;
    case FARCALL_DTYPE_F8E5M2FNUZ:
      return kF8E5M2FNUZFormat;
    case FARCALL_DTYPE_F8E4M3FNUZ:
      return kF8E4M3FNUZFormat;
    default:
      return kF8E4M3FNFormat;
  }
}

// The dtype is a template argument so that the format folds away.
template <int32_t D>
struct F8Codec {
  using T = uint8_t;
  using C = float;
  FARCALL_HD static C Load(T v) { return float_types_internal::Decode(F8FormatOf(D), v); }
  FARCALL_HD static T Store(C v) {
    return static_cast<T>(float_types_internal::Encode(F8FormatOf(D), v));
  }
};

// Calls f(Codec{}) for a real float dtype; false for any other dtype.
template <typename F>
bool VisitFloatCodec(int32_t dtype, F&& f) {
  switch (dtype) {
    case FARCALL_DTYPE_F16:
      f(F16Codec{});
      return true;
    case FARCALL_DTYPE_BF16:
      f(BF16Codec{});
      return true;
    case FARCALL_DTYPE_F32:
      f(F32Codec{});
      return true;
    case FARCALL_DTYPE_F64:
      f(F64Codec{});
      return true;
    case FARCALL_DTYPE_F8E5M2:
      f(F8Codec<FARCALL_DTYPE_F8E5M2>{});
      return true;
    case FARCALL_DTYPE_F8E4M3FN:
      f(F8Codec<FARCALL_DTYPE_F8E4M3FN>{});
      return true;
    case FARCALL_DTYPE_F8E4M3B11FNUZ:
      f(F8Codec<FARCALL_DTYPE_F8E4M3B11FNUZ>{});
      return true;
    case FARCALL_DTYPE_F8E5M2FNUZ:
      f(F8Codec<FARCALL_DTYPE_F8E5M2FNUZ>{});
      return true;
    case FARCALL_DTYPE_F8E4M3FNUZ:
      f(F8Codec<FARCALL_DTYPE_F8E4M3FNUZ>{});
      return true;
    default:
      return false;
  }
}

// Calls f(U{}) with the unsigned type as wide as an integer dtype. Signed
// and unsigned addition agree modulo 2^bits, and unsigned arithmetic wraps
// without undefined behaviour. False for any other dtype.
template <typename F>
bool VisitIntegerAsUnsigned(int32_t dtype, F&& f) {
  switch (dtype) {
    case FARCALL_DTYPE_S8:
    case FARCALL_DTYPE_U8:
      f(uint8_t{});
      return true;
    case FARCALL_DTYPE_S16:
    case FARCALL_DTYPE_U16:
      f(uint16_t{});
      return true;
    case FARCALL_DTYPE_S32:
    case FARCALL_DTYPE_U32:
      f(uint32_t{});
      return true;
    case FARCALL_DTYPE_S64:
    case FARCALL_DTYPE_U64:
      f(uint64_t{});
      return true;
    default:
      return false;
  }
}

}  // namespace farcall::agent::builtins

#endif  // FARCALL_DEVICE_AGENTS_BUILTINS_ELEMENT_CODECS_H_
