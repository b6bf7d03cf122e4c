// SPDX-License-Identifier: MIT
// Device helpers shared by minitensor's NVRTC kernels: the 16-bit float types as
// bits, conversions, 16-byte packs and strided offsets. Needs no toolkit header
// (NVRTC resolves none by itself), and compiles as host C++ for the CPU tests.
#pragma once

#include "layout.h"

#if defined(__CUDACC_RTC__) || defined(__CUDACC__)
#define MT_UNROLL _Pragma("unroll")
#define MT_NO_UNROLL _Pragma("unroll 1")
#else
#define MT_UNROLL
#define MT_NO_UNROLL
#endif

namespace mt {

// IEEE binary16 and bfloat16 as raw bits: the same layout as the host's mt::Half
// and mt::BFloat16, so tensor data pointers pass straight through.
struct Half {
  unsigned short bits;
};
struct BFloat16 {
  unsigned short bits;
};

template <typename A, typename B>
struct is_same {
  static constexpr bool value = false;
};
template <typename A>
struct is_same<A, A> {
  static constexpr bool value = true;
};
template <typename A, typename B>
constexpr bool is_same_v = is_same<A, B>::value;
template <typename T>
constexpr bool is_16bit_float_v = is_same_v<T, Half> || is_same_v<T, BFloat16>;

__device__ __forceinline__ float bits_to_float(unsigned u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  return __builtin_bit_cast(float, u);
#endif
}
__device__ __forceinline__ double bits_to_double(unsigned long long u) {
#ifdef __CUDA_ARCH__
  return __longlong_as_double((long long)u);
#else
  return __builtin_bit_cast(double, u);
#endif
}
__device__ __forceinline__ unsigned float_to_bits(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  return __builtin_bit_cast(unsigned, f);
#endif
}

// float -> binary16, round to nearest even (subnormals, overflow to inf, NaN kept quiet).
__device__ __forceinline__ unsigned short float_to_half_bits(float f) {
#ifdef __CUDA_ARCH__
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
#else
  unsigned x = float_to_bits(f);
  unsigned sign = (x >> 16) & 0x8000u;
  unsigned a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return (unsigned short)(sign | 0x7e00u);
  if (a >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u);
  if (a < 0x38800000u) {
    if (a < 0x33000000u) return (unsigned short)sign;
    unsigned mant = (a & 0x7fffffu) | 0x800000u;
    int drop = 126 - int(a >> 23);
    unsigned res = mant >> drop;
    unsigned rem = mant & ((1u << drop) - 1u);
    unsigned halfway = 1u << (drop - 1);
    if (rem > halfway || (rem == halfway && (res & 1u))) res++;
    return (unsigned short)(sign | res);
  }
  unsigned rounded = a + 0xfffu + ((a >> 13) & 1u);
  return (unsigned short)(sign | ((rounded - 0x38000000u) >> 13));
#endif
}

__device__ __forceinline__ float half_bits_to_float(unsigned short h) {
#ifdef __CUDA_ARCH__
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
#else
  unsigned sign = unsigned(h & 0x8000u) << 16;
  unsigned e = (h >> 10) & 0x1fu;
  unsigned mant = h & 0x3ffu;
  if (e == 0) {
    // zero or subnormal: mant * 2^-24, exact in float
    float v = float(mant) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  if (e == 31) return bits_to_float(sign | 0x7f800000u | (mant << 13));
  return bits_to_float(sign | ((e + 112u) << 23) | (mant << 13));
#endif
}

// float -> bfloat16, round to nearest even; NaN stays a quiet NaN.
__device__ __forceinline__ unsigned short float_to_bfloat16_bits(float f) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  unsigned short h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
#else
  unsigned u = float_to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (unsigned short)(u >> 16);
#endif
}

__device__ __forceinline__ float to_float(Half h) { return half_bits_to_float(h.bits); }
__device__ __forceinline__ float to_float(BFloat16 b) {
  return bits_to_float(unsigned(b.bits) << 16);
}

// The type a kernel computes in: float for the 16-bit types, T otherwise.
template <typename T>
struct compute_type {
  using type = T;
};
template <>
struct compute_type<Half> {
  using type = float;
};
template <>
struct compute_type<BFloat16> {
  using type = float;
};
template <typename T>
using compute_t = typename compute_type<T>::type;

template <typename T>
__device__ __forceinline__ compute_t<T> load_compute(T v) {
  if constexpr (is_16bit_float_v<T>)
    return to_float(v);
  else
    return v;
}
template <typename T>
__device__ __forceinline__ T store_compute(compute_t<T> v) {
  if constexpr (is_same_v<T, Half>)
    return Half{float_to_half_bits(v)};
  else if constexpr (is_same_v<T, BFloat16>)
    return BFloat16{float_to_bfloat16_bits(v)};
  else
    return v;
}

// -inf for the floating types, the smallest value for int64.
template <typename C>
__device__ __forceinline__ C lowest_value() {
  if constexpr (is_same_v<C, float>)
    return bits_to_float(0xff800000u);
  else if constexpr (is_same_v<C, double>)
    return bits_to_double(0xfff0000000000000ull);
  else
    return (long long)(-9223372036854775807LL - 1);
}

// Precise exponentials (no --use_fast_math): expf is within 2 ulp over its range.
__device__ __forceinline__ float exp_(float x) { return expf(x); }
__device__ __forceinline__ double exp_(double x) { return exp(x); }
__device__ __forceinline__ float log_(float x) { return logf(x); }
__device__ __forceinline__ double log_(double x) { return log(x); }
__device__ __forceinline__ float sqrt_(float x) { return sqrtf(x); }
__device__ __forceinline__ double sqrt_(double x) { return sqrt(x); }
__device__ __forceinline__ float tanh_(float x) { return tanhf(x); }
__device__ __forceinline__ double tanh_(double x) { return tanh(x); }
__device__ __forceinline__ float pow_(float x, float p) { return powf(x, p); }
__device__ __forceinline__ double pow_(double x, double p) { return pow(x, p); }
// Integer powers by squaring, for int64 tensors (non-negative exponents only).
// Unsigned arithmetic, so an overflow wraps as two's complement instead of being undefined.
__device__ __forceinline__ long long pow_(long long x, long long p) {
  unsigned long long r = 1, b = (unsigned long long)x;
  for (; p > 0; p >>= 1, b *= b)
    if (p & 1) r *= b;
  return (long long)r;
}

// Any dtype to any dtype, as PyTorch converts: 16-bit floats go through float
// (double -> half rounds twice, like c10::Half), to bool is "nonzero" (NaN is true).
template <typename To, typename From>
__device__ __forceinline__ To convert(From v) {
  if constexpr (is_same_v<To, From>) {
    return v;
  } else if constexpr (is_same_v<To, bool>) {
    if constexpr (is_16bit_float_v<From>)
      return (v.bits & 0x7fffu) != 0;
    else
      return v != From(0);
  } else if constexpr (is_16bit_float_v<To>) {
    float f;
    if constexpr (is_16bit_float_v<From>)
      f = to_float(v);
    else
      f = static_cast<float>(v);
    return store_compute<To>(f);
  } else if constexpr (is_16bit_float_v<From>) {
    return static_cast<To>(to_float(v));
  } else {
    return static_cast<To>(v);
  }
}

// 16 bytes of T, loaded and stored as one vector instruction when 16-byte aligned.
template <typename T>
struct alignas(16) Pack16 {
  static constexpr int size = 16 / sizeof(T);
  T v[size];
};

// Element offsets of linear index i in each of K operands (row-major over sizes).
// Index is unsigned when every index fits in 32 bits: 32-bit division is much
// cheaper, and that loop is unrolled; the 64-bit one (over 4G elements) is not,
// which keeps the code, and NVRTC's time, small.
template <int K, typename Index>
__device__ __forceinline__ void strided_offsets(const StridedLayout& l, Index i,
                                                long long (&off)[K]) {
  MT_UNROLL
  for (int k = 0; k < K; ++k) off[k] = 0;
  if constexpr (sizeof(Index) == 4) {
    MT_UNROLL
    for (int j = 0; j < kMaxKernelDims; ++j) {
      const int d = kMaxKernelDims - 1 - j;
      if (d < l.ndim) {
        const Index size = (Index)l.sizes[d];
        const Index idx = i % size;
        i /= size;
        MT_UNROLL
        for (int k = 0; k < K; ++k) off[k] += (long long)idx * l.strides[k][d];
      }
    }
  } else {
    MT_NO_UNROLL
    for (int d = l.ndim - 1; d >= 0; --d) {
      const Index size = (Index)l.sizes[d];
      const Index idx = i % size;
      i /= size;
      MT_UNROLL
      for (int k = 0; k < K; ++k) off[k] += (long long)idx * l.strides[k][d];
    }
  }
}

// Grid-stride helpers: this thread's first index and the stride.
__device__ __forceinline__ long long global_thread_index() {
  return (long long)blockIdx.x * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ long long grid_stride() { return (long long)gridDim.x * blockDim.x; }

}  // namespace mt
