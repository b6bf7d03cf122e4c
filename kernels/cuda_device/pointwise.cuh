// SPDX-License-Identifier: MIT
// The kernels of mt::jit::pointwise: NIN inputs and NOUT outputs of one dtype T, each
// element computed by a functor Op (generated from the user's expression) in the compute
// type C (float for the 16-bit types):  Op{}(const C* in, C* out, const C* s).
// Three variants, all grid-stride: vec (contiguous, every pointer 16-byte aligned: UNROLL
// 16-byte packs a thread in flight, the loop shape of SiLU's vec kernels), flat
// (contiguous, unaligned) and strided (views and broadcasts read in place).
#pragma once

#include "common.cuh"

namespace mt {

constexpr int kMaxPointwiseOperands = 8;  // inputs + outputs
constexpr int kMaxPointwiseScalars = 8;

// Operand pointers: the inputs, then the outputs.
template <int N>
struct PwPointers {
  void* p[N];
};
struct PwScalars {
  double v[kMaxPointwiseScalars];
};
// Sizes and per-operand strides (in elements), operands as in PwPointers.
template <int K>
struct PwLayout {
  int ndim;
  int pad_;
  long long sizes[kMaxKernelDims];
  long long strides[K][kMaxKernelDims];
};

// The functions an expression may call, for float and double alike.
namespace pw {
// clang-format off
__device__ __forceinline__ float exp(float x) { return ::expf(x); }
__device__ __forceinline__ double exp(double x) { return ::exp(x); }
__device__ __forceinline__ float log(float x) { return ::logf(x); }
__device__ __forceinline__ double log(double x) { return ::log(x); }
__device__ __forceinline__ float sqrt(float x) { return ::sqrtf(x); }
__device__ __forceinline__ double sqrt(double x) { return ::sqrt(x); }
__device__ __forceinline__ float rsqrt(float x) { return 1.0f / ::sqrtf(x); }
__device__ __forceinline__ double rsqrt(double x) { return 1.0 / ::sqrt(x); }
__device__ __forceinline__ float tanh(float x) { return ::tanhf(x); }
__device__ __forceinline__ double tanh(double x) { return ::tanh(x); }
__device__ __forceinline__ float sin(float x) { return ::sinf(x); }
__device__ __forceinline__ double sin(double x) { return ::sin(x); }
__device__ __forceinline__ float cos(float x) { return ::cosf(x); }
__device__ __forceinline__ double cos(double x) { return ::cos(x); }
__device__ __forceinline__ float abs(float x) { return ::fabsf(x); }
__device__ __forceinline__ double abs(double x) { return ::fabs(x); }
__device__ __forceinline__ float erf(float x) { return ::erff(x); }
__device__ __forceinline__ double erf(double x) { return ::erf(x); }
__device__ __forceinline__ float floor(float x) { return ::floorf(x); }
__device__ __forceinline__ double floor(double x) { return ::floor(x); }
__device__ __forceinline__ float ceil(float x) { return ::ceilf(x); }
__device__ __forceinline__ double ceil(double x) { return ::ceil(x); }
__device__ __forceinline__ float log1p(float x) { return ::log1pf(x); }
__device__ __forceinline__ double log1p(double x) { return ::log1p(x); }
__device__ __forceinline__ float expm1(float x) { return ::expm1f(x); }
__device__ __forceinline__ double expm1(double x) { return ::expm1(x); }
__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + ::expf(-x)); }
__device__ __forceinline__ double sigmoid(double x) { return 1.0 / (1.0 + ::exp(-x)); }
__device__ __forceinline__ float max(float x, float y) { return ::fmaxf(x, y); }
__device__ __forceinline__ double max(double x, double y) { return ::fmax(x, y); }
__device__ __forceinline__ float min(float x, float y) { return ::fminf(x, y); }
__device__ __forceinline__ double min(double x, double y) { return ::fmin(x, y); }
__device__ __forceinline__ float pow(float x, float y) { return ::powf(x, y); }
__device__ __forceinline__ double pow(double x, double y) { return ::pow(x, y); }
template <class C> __device__ __forceinline__ C sign(C x) { return x > C(0) ? C(1) : x < C(0) ? C(-1) : x * C(0); }
template <class C> __device__ __forceinline__ C relu(C x) { return x < C(0) ? C(0) : x; }
// clang-format on
}  // namespace pw

template <typename T, int NS>
__device__ __forceinline__ void load_scalars(const PwScalars& sc, compute_t<T> (&s)[NS]) {
  MT_UNROLL
  for (int k = 0; k < NS; ++k) s[k] = compute_t<T>(sc.v[k]);
}

// Element i of every operand through Op, contiguous operands.
template <typename T, typename Op, int NIN, int NOUT>
__device__ __forceinline__ void pointwise_elem(const PwPointers<NIN + NOUT>& ptr, long long i,
                                               const compute_t<T>* s) {
  using C = compute_t<T>;
  C in[NIN], out[NOUT];
  MT_UNROLL
  for (int k = 0; k < NIN; ++k) in[k] = load_compute(static_cast<const T*>(ptr.p[k])[i]);
  Op{}(in, out, s);
  MT_UNROLL
  for (int k = 0; k < NOUT; ++k) static_cast<T*>(ptr.p[NIN + k])[i] = store_compute<T>(out[k]);
}

// Element offsets of linear index i in each of K operands (row-major over sizes); Index
// is 32-bit when every index fits, as in strided_offsets.
template <int K, typename Index>
__device__ __forceinline__ void pw_offsets(const PwLayout<K>& l, Index i, long long (&off)[K]) {
  MT_UNROLL
  for (int k = 0; k < K; ++k) off[k] = 0;
  MT_NO_UNROLL
  for (int d = l.ndim - 1; d >= 0; --d) {
    const Index size = (Index)l.sizes[d];
    const Index idx = i % size;
    i /= size;
    MT_UNROLL
    for (int k = 0; k < K; ++k) off[k] += (long long)idx * l.strides[k][d];
  }
}

template <typename T, typename Op, int NIN, int NOUT, typename Index>
__device__ __forceinline__ void pointwise_strided_loop(const PwPointers<NIN + NOUT>& ptr,
                                                       long long n, const compute_t<T>* s,
                                                       const PwLayout<NIN + NOUT>& l) {
  using C = compute_t<T>;
  for (long long i = global_thread_index(); i < n; i += grid_stride()) {
    long long off[NIN + NOUT];
    pw_offsets<NIN + NOUT>(l, (Index)i, off);
    C in[NIN], out[NOUT];
    MT_UNROLL
    for (int k = 0; k < NIN; ++k) in[k] = load_compute(static_cast<const T*>(ptr.p[k])[off[k]]);
    Op{}(in, out, s);
    MT_UNROLL
    for (int k = 0; k < NOUT; ++k)
      static_cast<T*>(ptr.p[NIN + k])[off[NIN + k]] = store_compute<T>(out[k]);
  }
}

}  // namespace mt

// Every pointer 16-byte aligned and every operand contiguous. UNROLL packs a thread per
// loop; the n % pack tail elements go to the first threads of the grid.
template <typename T, typename Op, int NIN, int NOUT, int UNROLL>
__global__ void pointwise_vec(mt::PwPointers<NIN + NOUT> ptr, long long n, mt::PwScalars sc) {
  using C = mt::compute_t<T>;
  using P = mt::Pack16<T>;
  C s[mt::kMaxPointwiseScalars];
  mt::load_scalars<T>(sc, s);
  const long long npack = n / P::size;
  const long long stride = mt::grid_stride();
  for (long long base = mt::global_thread_index(); base < npack; base += stride * UNROLL) {
    P v[NIN + NOUT][UNROLL] = {};
    MT_UNROLL
    for (int u = 0; u < UNROLL; ++u)
      if (base + u * stride < npack) {
        MT_UNROLL
        for (int k = 0; k < NIN; ++k) v[k][u] = static_cast<const P*>(ptr.p[k])[base + u * stride];
      }
    MT_UNROLL
    for (int u = 0; u < UNROLL; ++u) {
      MT_UNROLL
      for (int e = 0; e < P::size; ++e) {
        C in[NIN], out[NOUT];
        MT_UNROLL
        for (int k = 0; k < NIN; ++k) in[k] = mt::load_compute(v[k][u].v[e]);
        Op{}(in, out, s);
        MT_UNROLL
        for (int k = 0; k < NOUT; ++k) v[NIN + k][u].v[e] = mt::store_compute<T>(out[k]);
      }
    }
    MT_UNROLL
    for (int u = 0; u < UNROLL; ++u)
      if (base + u * stride < npack) {
        MT_UNROLL
        for (int k = 0; k < NOUT; ++k)
          static_cast<P*>(ptr.p[NIN + k])[base + u * stride] = v[NIN + k][u];
      }
  }
  const long long tail = npack * P::size + mt::global_thread_index();
  if (tail < n) mt::pointwise_elem<T, Op, NIN, NOUT>(ptr, tail, s);
}

// Every operand contiguous, some pointer not 16-byte aligned.
template <typename T, typename Op, int NIN, int NOUT>
__global__ void pointwise_flat(mt::PwPointers<NIN + NOUT> ptr, long long n, mt::PwScalars sc) {
  mt::compute_t<T> s[mt::kMaxPointwiseScalars];
  mt::load_scalars<T>(sc, s);
  for (long long i = mt::global_thread_index(); i < n; i += mt::grid_stride())
    mt::pointwise_elem<T, Op, NIN, NOUT>(ptr, i, s);
}

// Any strides (0 along a broadcast dim); the outputs are written where their strides say.
template <typename T, typename Op, int NIN, int NOUT>
__global__ void pointwise_strided(mt::PwPointers<NIN + NOUT> ptr, long long n, mt::PwScalars sc,
                                  mt::PwLayout<NIN + NOUT> layout) {
  mt::compute_t<T> s[mt::kMaxPointwiseScalars];
  mt::load_scalars<T>(sc, s);
  if (n <= 0xffffffffLL)
    mt::pointwise_strided_loop<T, Op, NIN, NOUT, unsigned>(ptr, n, s, layout);
  else
    mt::pointwise_strided_loop<T, Op, NIN, NOUT, unsigned long long>(ptr, n, s, layout);
}
