// The built-in handlers' OpenCL C kernels for the oneapi agent (OpenCL 1.2).
// Embedded into the agent at build time and built for each device when the
// agent starts. The narrow floats compute in float and round once, on store,
// with the same bit-level rules as core/float_formats.h, so every platform
// rounds alike. FARCALL_HAS_FP64 is defined when the device has cl_khr_fp64;
// without it float64 and complex128 kernels are absent and sums accumulate
// in float.

#ifdef FARCALL_HAS_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
typedef double acc_t;
#else
typedef float acc_t;
#endif

#define SUM_WG 256

// ---- Small float formats: sign, exponent bits, mantissa bits, bias. ------
// nan_style: 0 IEEE (inf and NaN), 1 FN (no inf; all ones is NaN),
// 2 FNUZ (no inf, no -0; 0x80 is NaN).

float pow2i(int k) { return as_float((uint)(k + 127) << 23); }

float mini_decode(uint v, int eb, int mb, int bias, int nan_style) {
  const int total = 1 + eb + mb;
  const uint mag_mask = (1u << (total - 1)) - 1;
  const uint sign = (v >> (total - 1)) & 1u;
  const uint mag = v & mag_mask;
  const uint e = mag >> mb;
  const uint m = mag & ((1u << mb) - 1);
  const uint sign32 = sign << 31;
  if (nan_style == 0) {
    if (e == (1u << eb) - 1) {
      return as_float(m == 0 ? (sign32 | 0x7F800000u)
                             : (sign32 | 0x7FC00000u | (m << (23 - mb))));
    }
  } else if (nan_style == 1) {
    if (mag == mag_mask) return as_float(sign32 | 0x7FC00000u);
  } else {
    if (sign != 0 && mag == 0) return as_float(0x7FC00000u);
  }
  if (e == 0) {
    const float r = (float)m * pow2i(1 - bias - mb);
    return sign != 0 ? -r : r;
  }
  return as_float(sign32 | ((uint)((int)e - bias + 127) << 23) | (m << (23 - mb)));
}

uint mini_encode(float f, int eb, int mb, int bias, int nan_style) {
  const int total = 1 + eb + mb;
  const uint mag_mask = (1u << (total - 1)) - 1;
  const uint bits = as_uint(f);
  const uint a = bits & 0x7FFFFFFFu;
  const uint sign_out = (bits >> 31) << (total - 1);
  const uint exp_all_ones = ((1u << eb) - 1) << mb;
  uint nan, overflow, max_finite;
  if (nan_style == 0) {
    nan = sign_out | exp_all_ones | (1u << (mb - 1));
    overflow = sign_out | exp_all_ones;
    max_finite = exp_all_ones - 1;
  } else if (nan_style == 1) {
    nan = sign_out | mag_mask;
    overflow = nan;
    max_finite = mag_mask - 1;
  } else {
    nan = 1u << (total - 1);
    overflow = nan;
    max_finite = mag_mask;
  }
  if (a > 0x7F800000u) return nan;
  if (a == 0x7F800000u) return overflow;
  const int min_normal_exp = 1 - bias;
  const int e32 = (int)(a >> 23) - 127;
  uint mag;
  if (e32 >= min_normal_exp) {
    const int shift = 23 - mb;
    uint r = (a + ((1u << (shift - 1)) - 1) + ((a >> shift) & 1u)) >> shift;
    r -= (uint)(127 - bias) << mb;
    if (r > max_finite) return overflow;
    mag = r;
  } else if ((a >> 23) == 0) {
    mag = 0;
  } else {
    const uint sig = (a & 0x7FFFFFu) | 0x800000u;
    const int sh = 23 + min_normal_exp - mb - e32;
    mag = sh > 24 ? 0 : (sig + ((1u << (sh - 1)) - 1) + ((sig >> sh) & 1u)) >> sh;
  }
  if (mag == 0 && nan_style == 2) return 0;
  return sign_out | mag;
}

float bf16_load(ushort v) { return as_float((uint)v << 16); }
ushort bf16_store(float f) {
  const uint u = as_uint(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (ushort)((u >> 16) | 0x40u);
  return (ushort)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

#define IDENTITY(v) (v)
#define F16_LOAD(v) mini_decode((v), 5, 10, 15, 0)
#define F16_STORE(v) ((ushort)mini_encode((v), 5, 10, 15, 0))
#define E5M2_LOAD(v) mini_decode((v), 5, 2, 15, 0)
#define E5M2_STORE(v) ((uchar)mini_encode((v), 5, 2, 15, 0))
#define E4M3FN_LOAD(v) mini_decode((v), 4, 3, 7, 1)
#define E4M3FN_STORE(v) ((uchar)mini_encode((v), 4, 3, 7, 1))
#define E4M3B11FNUZ_LOAD(v) mini_decode((v), 4, 3, 11, 2)
#define E4M3B11FNUZ_STORE(v) ((uchar)mini_encode((v), 4, 3, 11, 2))
#define E5M2FNUZ_LOAD(v) mini_decode((v), 5, 2, 16, 2)
#define E5M2FNUZ_STORE(v) ((uchar)mini_encode((v), 5, 2, 16, 2))
#define E4M3FNUZ_LOAD(v) mini_decode((v), 4, 3, 8, 2)
#define E4M3FNUZ_STORE(v) ((uchar)mini_encode((v), 4, 3, 8, 2))

// ---- Sums: two stages, in an order fixed by the element count. -----------
// Up to SUM_GROUPS work-groups each sum a grid-stride share of the elements
// into a partial (sum_part_*), then one work-group sums the partials
// (sum_final_*). Each group adds its items' values in a fixed tree; the host
// picks the groups from the count alone, so a sum is the same on every run.
#define SUM_GROUPS 256

// The work-group's total of `v` (one per item), in the tree's order.
#define GROUP_SUM(NAME, A)                                                      \
  A group_sum_##NAME(A v, __local A* part) {                                    \
    const size_t t = get_local_id(0);                                           \
    part[t] = v;                                                                \
    barrier(CLK_LOCAL_MEM_FENCE);                                               \
    for (uint s = SUM_WG / 2; s > 0; s >>= 1) {                                 \
      if (t < s) part[t] += part[t + s];                                        \
      barrier(CLK_LOCAL_MEM_FENCE);                                             \
    }                                                                           \
    const A total = part[0];                                                    \
    barrier(CLK_LOCAL_MEM_FENCE);                                               \
    return total;                                                               \
  }
GROUP_SUM(acc, acc_t)
GROUP_SUM(ulong, ulong)

// ---- Float kernels: scale, axpy, add, sum for one storage type. ----------
#define FLOAT_KERNELS(NAME, T, C, LOAD, STORE)                                   \
  __kernel void scale_##NAME(__global const T* x, __global T* out, ulong n,     \
                             C alpha) {                                         \
    for (size_t i = get_global_id(0); i < n; i += get_global_size(0))           \
      out[i] = STORE(alpha * LOAD(x[i]));                                       \
  }                                                                             \
  __kernel void axpy_##NAME(__global const T* x, __global const T* y,           \
                            __global T* out, ulong n, C alpha) {                \
    for (size_t i = get_global_id(0); i < n; i += get_global_size(0))           \
      out[i] = STORE(alpha * LOAD(x[i]) + LOAD(y[i]));                          \
  }                                                                             \
  __kernel void add_##NAME(__global const T* a, __global const T* b,            \
                           __global T* out, ulong n) {                          \
    for (size_t i = get_global_id(0); i < n; i += get_global_size(0))           \
      out[i] = STORE(LOAD(a[i]) + LOAD(b[i]));                                  \
  }                                                                             \
  __kernel __attribute__((reqd_work_group_size(SUM_WG, 1, 1)))                  \
  void sum_part_##NAME(__global const T* x, ulong n, ulong lanes,               \
                       __global acc_t* partials) {                              \
    __local acc_t part[SUM_WG];                                                 \
    const ulong count = n / lanes;                                              \
    acc_t acc0 = 0, acc1 = 0;                                                   \
    for (ulong i = get_global_id(0); i < count; i += get_global_size(0)) {      \
      acc0 += (acc_t)LOAD(x[i * lanes]);                                        \
      if (lanes == 2) acc1 += (acc_t)LOAD(x[i * lanes + 1]);                    \
    }                                                                           \
    acc0 = group_sum_acc(acc0, part);                                           \
    acc1 = group_sum_acc(acc1, part);                                           \
    if (get_local_id(0) == 0) {                                                 \
      partials[2 * get_group_id(0)] = acc0;                                     \
      partials[2 * get_group_id(0) + 1] = acc1;                                 \
    }                                                                           \
  }                                                                             \
  __kernel __attribute__((reqd_work_group_size(SUM_WG, 1, 1)))                  \
  void sum_final_##NAME(__global const acc_t* partials, uint groups,            \
                        ulong lanes, __global T* out) {                         \
    __local acc_t part[SUM_WG];                                                 \
    const size_t t = get_local_id(0);                                           \
    acc_t total0 = group_sum_acc(t < groups ? partials[2 * t] : 0, part);       \
    acc_t total1 = group_sum_acc(t < groups ? partials[2 * t + 1] : 0, part);   \
    if (t == 0) {                                                               \
      out[0] = STORE((C)total0);                                                \
      if (lanes == 2) out[1] = STORE((C)total1);                                \
    }                                                                           \
  }

FLOAT_KERNELS(f32, float, float, IDENTITY, IDENTITY)
#ifdef FARCALL_HAS_FP64
FLOAT_KERNELS(f64, double, double, IDENTITY, IDENTITY)
#endif
FLOAT_KERNELS(f16, ushort, float, F16_LOAD, F16_STORE)
FLOAT_KERNELS(bf16, ushort, float, bf16_load, bf16_store)
FLOAT_KERNELS(f8e5m2, uchar, float, E5M2_LOAD, E5M2_STORE)
FLOAT_KERNELS(f8e4m3fn, uchar, float, E4M3FN_LOAD, E4M3FN_STORE)
FLOAT_KERNELS(f8e4m3b11fnuz, uchar, float, E4M3B11FNUZ_LOAD, E4M3B11FNUZ_STORE)
FLOAT_KERNELS(f8e5m2fnuz, uchar, float, E5M2FNUZ_LOAD, E5M2FNUZ_STORE)
FLOAT_KERNELS(f8e4m3fnuz, uchar, float, E4M3FNUZ_LOAD, E4M3FNUZ_STORE)

// ---- Integer kernels: unsigned arithmetic wraps like the signed types. ----
#define INT_KERNELS(NAME, U)                                                    \
  __kernel void add_##NAME(__global const U* a, __global const U* b,            \
                           __global U* out, ulong n) {                          \
    for (size_t i = get_global_id(0); i < n; i += get_global_size(0))           \
      out[i] = (U)(a[i] + b[i]);                                                \
  }                                                                             \
  __kernel __attribute__((reqd_work_group_size(SUM_WG, 1, 1)))                  \
  void sum_part_##NAME(__global const U* x, ulong n, ulong lanes,               \
                       __global ulong* partials) {                              \
    __local ulong part[SUM_WG];                                                 \
    ulong acc = 0;                                                              \
    for (ulong i = get_global_id(0); i < n; i += get_global_size(0)) acc += x[i]; \
    acc = group_sum_ulong(acc, part);                                           \
    if (get_local_id(0) == 0) partials[get_group_id(0)] = acc;                  \
  }                                                                             \
  __kernel __attribute__((reqd_work_group_size(SUM_WG, 1, 1)))                  \
  void sum_final_##NAME(__global const ulong* partials, uint groups,            \
                        ulong lanes, __global U* out) {                         \
    __local ulong part[SUM_WG];                                                 \
    const size_t t = get_local_id(0);                                           \
    const ulong total = group_sum_ulong(t < groups ? partials[t] : 0, part);    \
    if (t == 0) out[0] = (U)total;                                              \
  }

INT_KERNELS(u8, uchar)
INT_KERNELS(u16, ushort)
INT_KERNELS(u32, uint)
INT_KERNELS(u64, ulong)
