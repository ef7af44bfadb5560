// farcall handler SDK: facts about dtypes, for handlers that take any
// dtype and check it themselves (the built-ins do): names for messages, item
// sizes, kinds, and each dtype's C++ element type. Keyed by FarcallDType numbers; needs nothing but
// the standard library. Included by farcall/handler.h.
#ifndef FARCALL_HANDLER_DTYPES_H_
#define FARCALL_HANDLER_DTYPES_H_

#include <complex>
#include <cstdint>
#include <string_view>
#include <type_traits>

#include "farcall/handler_api.h"

namespace farcall::sdk {

// The dtype's name as JAX and numpy write it ("float32"), for messages.
inline constexpr std::string_view DTypeName(int32_t d) {
  switch (d) {
    case FARCALL_DTYPE_PRED:
      return "bool";
    case FARCALL_DTYPE_S8:
      return "int8";
    case FARCALL_DTYPE_S16:
      return "int16";
    case FARCALL_DTYPE_S32:
      return "int32";
    case FARCALL_DTYPE_S64:
      return "int64";
    case FARCALL_DTYPE_U8:
      return "uint8";
    case FARCALL_DTYPE_U16:
      return "uint16";
    case FARCALL_DTYPE_U32:
      return "uint32";
    case FARCALL_DTYPE_U64:
      return "uint64";
    case FARCALL_DTYPE_F16:
      return "float16";
    case FARCALL_DTYPE_F32:
      return "float32";
    case FARCALL_DTYPE_F64:
      return "float64";
    case FARCALL_DTYPE_C64:
      return "complex64";
    case FARCALL_DTYPE_BF16:
      return "bfloat16";
    case FARCALL_DTYPE_C128:
      return "complex128";
    case FARCALL_DTYPE_F8E5M2:
      return "float8_e5m2";
    case FARCALL_DTYPE_F8E4M3FN:
      return "float8_e4m3fn";
    case FARCALL_DTYPE_F8E4M3B11FNUZ:
      return "float8_e4m3b11fnuz";
    case FARCALL_DTYPE_F8E5M2FNUZ:
      return "float8_e5m2fnuz";
    case FARCALL_DTYPE_F8E4M3FNUZ:
      return "float8_e4m3fnuz";
    default:
      return "invalid";
  }
}

// Bytes per element; 0 for a number farcall does not know.
inline constexpr int64_t ItemSize(int32_t d) {
  switch (d) {
    case FARCALL_DTYPE_PRED:
    case FARCALL_DTYPE_S8:
    case FARCALL_DTYPE_U8:
    case FARCALL_DTYPE_F8E5M2:
    case FARCALL_DTYPE_F8E4M3FN:
    case FARCALL_DTYPE_F8E4M3B11FNUZ:
    case FARCALL_DTYPE_F8E5M2FNUZ:
    case FARCALL_DTYPE_F8E4M3FNUZ:
      return 1;
    case FARCALL_DTYPE_S16:
    case FARCALL_DTYPE_U16:
    case FARCALL_DTYPE_F16:
    case FARCALL_DTYPE_BF16:
      return 2;
    case FARCALL_DTYPE_S32:
    case FARCALL_DTYPE_U32:
    case FARCALL_DTYPE_F32:
      return 4;
    case FARCALL_DTYPE_S64:
    case FARCALL_DTYPE_U64:
    case FARCALL_DTYPE_F64:
    case FARCALL_DTYPE_C64:
      return 8;
    case FARCALL_DTYPE_C128:
      return 16;
    default:
      return 0;
  }
}

inline constexpr bool IsKnownDType(int32_t d) { return ItemSize(d) > 0; }

// Real floats of every width, the float8 formats included.
inline constexpr bool IsFloating(int32_t d) {
  switch (d) {
    case FARCALL_DTYPE_F16:
    case FARCALL_DTYPE_BF16:
    case FARCALL_DTYPE_F32:
    case FARCALL_DTYPE_F64:
    case FARCALL_DTYPE_F8E5M2:
    case FARCALL_DTYPE_F8E4M3FN:
    case FARCALL_DTYPE_F8E4M3B11FNUZ:
    case FARCALL_DTYPE_F8E5M2FNUZ:
    case FARCALL_DTYPE_F8E4M3FNUZ:
      return true;
    default:
      return false;
  }
}

inline constexpr bool IsComplex(int32_t d) {
  return d == FARCALL_DTYPE_C64 || d == FARCALL_DTYPE_C128;
}

// Integers, floats and complex numbers; not bool.
inline constexpr bool IsNumeric(int32_t d) { return IsKnownDType(d) && d != FARCALL_DTYPE_PRED; }

// The dtype of one part of a complex dtype (complex64: float32); any other
// dtype is its own.
inline constexpr FarcallDType PartDType(int32_t d) {
  if (d == FARCALL_DTYPE_C64) return FARCALL_DTYPE_F32;
  if (d == FARCALL_DTYPE_C128) return FARCALL_DTYPE_F64;
  return static_cast<FarcallDType>(d);
}

// Parts per element: 2 for complex dtypes, else 1.
inline constexpr int64_t Lanes(int32_t d) { return IsComplex(d) ? 2 : 1; }

// The C++ type of one element of dtype D: the narrow floats (f16, bf16,
// the f8 formats) as their raw bits; void for any other D (such as
// kAnyDType, any dtype).
template <int32_t D>
struct ElementType {
  using type = void;
};
template <>
struct ElementType<FARCALL_DTYPE_PRED> {
  using type = bool;
};
template <>
struct ElementType<FARCALL_DTYPE_S8> {
  using type = int8_t;
};
template <>
struct ElementType<FARCALL_DTYPE_S16> {
  using type = int16_t;
};
template <>
struct ElementType<FARCALL_DTYPE_S32> {
  using type = int32_t;
};
template <>
struct ElementType<FARCALL_DTYPE_S64> {
  using type = int64_t;
};
template <>
struct ElementType<FARCALL_DTYPE_U8> {
  using type = uint8_t;
};
template <>
struct ElementType<FARCALL_DTYPE_U16> {
  using type = uint16_t;
};
template <>
struct ElementType<FARCALL_DTYPE_U32> {
  using type = uint32_t;
};
template <>
struct ElementType<FARCALL_DTYPE_U64> {
  using type = uint64_t;
};
template <>
struct ElementType<FARCALL_DTYPE_F16> {
  using type = uint16_t;
};
template <>
struct ElementType<FARCALL_DTYPE_BF16> {
  using type = uint16_t;
};
template <>
struct ElementType<FARCALL_DTYPE_F32> {
  using type = float;
};
template <>
struct ElementType<FARCALL_DTYPE_F64> {
  using type = double;
};
template <>
struct ElementType<FARCALL_DTYPE_C64> {
  using type = std::complex<float>;
};
template <>
struct ElementType<FARCALL_DTYPE_C128> {
  using type = std::complex<double>;
};
template <>
struct ElementType<FARCALL_DTYPE_F8E5M2> {
  using type = uint8_t;
};
template <>
struct ElementType<FARCALL_DTYPE_F8E4M3FN> {
  using type = uint8_t;
};
template <>
struct ElementType<FARCALL_DTYPE_F8E4M3B11FNUZ> {
  using type = uint8_t;
};
template <>
struct ElementType<FARCALL_DTYPE_F8E5M2FNUZ> {
  using type = uint8_t;
};
template <>
struct ElementType<FARCALL_DTYPE_F8E4M3FNUZ> {
  using type = uint8_t;
};

// Whether T is ElementType<d>::type (the raw-bits types match every dtype
// stored in them: uint16_t is uint16, float16 and bfloat16).
template <typename T>
constexpr bool IsElementType(int32_t d) {
  switch (d) {
#define FARCALL_SDK_ELEMENT_CASE(D) \
  case D:                           \
    return std::is_same_v<T, typename ElementType<D>::type>;
    FARCALL_SDK_ELEMENT_CASE(FARCALL_DTYPE_PRED)
    FARCALL_SDK_ELEMENT_CASE(FARCALL_DTYPE_S8)
    FARCALL_SDK_ELEMENT_CASE(FARCALL_DTYPE_S16)
    FARCALL_SDK_ELEMENT_CASE(FARCALL_DTYPE_S32)
    FARCALL_SDK_ELEMENT_CASE(FARCALL_DTYPE_S64)
    FARCALL_SDK_ELEMENT_CASE(FARCALL_DTYPE_U8)
    FARCALL_SDK_ELEMENT_CASE(FARCALL_DTYPE_U16)
    FARCALL_SDK_ELEMENT_CASE(FARCALL_DTYPE_U32)
    FARCALL_SDK_ELEMENT_CASE(FARCALL_DTYPE_U64)
    FARCALL_SDK_ELEMENT_CASE(FARCALL_DTYPE_F16)
    FARCALL_SDK_ELEMENT_CASE(FARCALL_DTYPE_BF16)
    FARCALL_SDK_ELEMENT_CASE(FARCALL_DTYPE_F32)
    FARCALL_SDK_ELEMENT_CASE(FARCALL_DTYPE_F64)
    FARCALL_SDK_ELEMENT_CASE(FARCALL_DTYPE_C64)
    FARCALL_SDK_ELEMENT_CASE(FARCALL_DTYPE_C128)
    FARCALL_SDK_ELEMENT_CASE(FARCALL_DTYPE_F8E5M2)
    FARCALL_SDK_ELEMENT_CASE(FARCALL_DTYPE_F8E4M3FN)
    FARCALL_SDK_ELEMENT_CASE(FARCALL_DTYPE_F8E4M3B11FNUZ)
    FARCALL_SDK_ELEMENT_CASE(FARCALL_DTYPE_F8E5M2FNUZ)
    FARCALL_SDK_ELEMENT_CASE(FARCALL_DTYPE_F8E4M3FNUZ)
#undef FARCALL_SDK_ELEMENT_CASE
    default:
      return false;
  }
}

}  // namespace farcall::sdk

#endif  // FARCALL_HANDLER_DTYPES_H_
