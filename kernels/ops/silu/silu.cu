// SPDX-License-Identifier: MIT
// SiLU on the GPU: forward y = x * sigmoid(x) and the fused backward
// grad_in = grad * s * (1 + x * (1 - s)), s = sigmoid(x), in one pass.
// T is float, double, mt::Half or mt::BFloat16 (the 16-bit types compute in float, with
// the approximate SFU forms of Note [16-bit SiLU]).
// Three variants each: contiguous, 16-byte vectorized (pointers 16-byte aligned,
// chosen by the launcher), and strided (up to 8 dims, operand 0 is the output).
// All loops are grid-stride, so any grid size is correct; exact in-place
// (y == x, grad_in == grad) is fine: each element is read, then written, by one thread.
#if defined(__CUDACC_RTC__) || defined(__CUDACC__)
#include "common.cuh"  // kernels/cuda_device/common.cuh, embedded by its file name like this one
#else
#include "kernels/cuda_device/common.cuh"  // the tests' CPU emulation compiles this file as host C++
#endif

namespace mt {

template <typename C>
__device__ __forceinline__ C silu_value(C x) {
  return x / (C(1) + exp_(-x));
}

template <typename C>
__device__ __forceinline__ C silu_grad_value(C g, C x) {
  const C s = C(1) / (C(1) + exp_(-x));
  return g * s * (C(1) + x * (C(1) - s));
}

// Note [16-bit SiLU]
// A float16 or bfloat16 result keeps 11 or 8 significant bits and is rounded once from
// float, so the precise expf and IEEE division of the float path (about 20 instructions
// an element, two of them on the SFU) buy nothing the rounding keeps; at 2 bytes an
// element they kept the issue slots so busy that bfloat16 SiLU ran at 90% of a copy
// while float32 ran at 99% (docs/performance.md, GPU SiLU). The 16-bit types take this
// form instead:
//   z = 2^(-|x| log2 e) = e^-|x| in (0, 1]      ex2.approx, no flush of tiny z
//   r = 1 / (1 + z)        1 + z in (1, 2]       rcp.approx (1 ulp of float)
//   sigmoid(x) = x >= 0 ? r : z r,   1 - sigmoid(x) = x >= 0 ? z r : r
// Each is within a few float ulps (2^-21 relative), far below the 2^-9 (bfloat16) and
// 2^-12 (float16) half-ulp of the rounding, and no step cancels: 1 - sigmoid(x) for large
// x is z r, not 1 - r. A tiny z is kept as a subnormal (ex2.approx.f32 without .ftz), so
// silu(-88) is -5.3e-37 as in float arithmetic, not 0. NaN gives NaN, silu(+inf) = inf,
// silu(-inf) = NaN (-inf * 0), as x / (1 + e^-x) gives. The test sweeps every 16-bit
// input against float64 (tests/test_cuda_ops.cpp, "every 16-bit input").
// (Compiled as host C++ for the CPU tests, they are exp2f and a division.)
__device__ __forceinline__ float ex2_approx(float x) {
#ifdef __CUDA_ARCH__
  float y;
  asm("ex2.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#else
  return exp2f(x);
#endif
}
__device__ __forceinline__ float rcp_approx_ftz(float x) {
#ifdef __CUDA_ARCH__
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#else
  return 1.0f / x;
#endif
}

struct SigmoidParts {
  float s, one_minus_s;  // sigmoid(x) and 1 - sigmoid(x)
};
__device__ __forceinline__ SigmoidParts sigmoid_parts(float x) {
  const float z = ex2_approx(-1.4426950408889634f * fabsf(x));
  const float r = rcp_approx_ftz(1.0f + z);
  const float zr = z * r;
  return x >= 0.0f ? SigmoidParts{r, zr} : SigmoidParts{zr, r};
}

template <typename T>
__device__ __forceinline__ T silu_elem(T x) {
  if constexpr (is_16bit_float_v<T>) {
    const float f = load_compute(x);
    return store_compute<T>(f * sigmoid_parts(f).s);
  } else {
    return silu_value(x);
  }
}

template <typename T>
__device__ __forceinline__ T silu_grad_elem(T g, T x) {
  if constexpr (is_16bit_float_v<T>) {
    const float f = load_compute(x);
    const SigmoidParts p = sigmoid_parts(f);
    return store_compute<T>(load_compute(g) * p.s * (1.0f + f * p.one_minus_s));
  } else {
    return silu_grad_value(g, x);
  }
}

}  // namespace mt

template <typename T>
__global__ void silu_fwd(const T* __restrict__ x, T* __restrict__ y, long long n) {
  for (long long i = mt::global_thread_index(); i < n; i += mt::grid_stride())
    y[i] = mt::silu_elem(x[i]);
}

// UNROLL 16-byte packs per thread per iteration, so several loads are in flight;
// the n % (16 / sizeof(T)) tail elements go to the first threads of the grid.
template <typename T, int UNROLL>
__global__ void silu_fwd_vec(const T* __restrict__ x, T* __restrict__ y, long long n) {
  using P = mt::Pack16<T>;
  const long long npack = n / P::size;
  const long long stride = mt::grid_stride();
  const P* xp = reinterpret_cast<const P*>(x);
  P* yp = reinterpret_cast<P*>(y);
  for (long long base = mt::global_thread_index(); base < npack; base += stride * UNROLL) {
    P v[UNROLL] = {};
    MT_UNROLL
    for (int u = 0; u < UNROLL; ++u)
      if (base + u * stride < npack) v[u] = xp[base + u * stride];
    MT_UNROLL
    for (int u = 0; u < UNROLL; ++u) {
      MT_UNROLL
      for (int k = 0; k < P::size; ++k) v[u].v[k] = mt::silu_elem(v[u].v[k]);
    }
    MT_UNROLL
    for (int u = 0; u < UNROLL; ++u)
      if (base + u * stride < npack) yp[base + u * stride] = v[u];
  }
  const long long tail = npack * P::size + mt::global_thread_index();
  if (tail < n) y[tail] = mt::silu_elem(x[tail]);
}

template <typename T, typename Index>
__device__ __forceinline__ void silu_fwd_strided_loop(const T* x, T* y, long long n,
                                                      const mt::StridedLayout& l) {
  for (long long i = mt::global_thread_index(); i < n; i += mt::grid_stride()) {
    long long off[2];
    mt::strided_offsets<2>(l, (Index)i, off);
    y[off[0]] = mt::silu_elem(x[off[1]]);
  }
}

// layout.strides[0] belongs to y, [1] to x.
template <typename T>
__global__ void silu_fwd_strided(const T* x, T* y, long long n, mt::StridedLayout layout) {
  if (n <= 0xffffffffLL)
    silu_fwd_strided_loop<T, unsigned>(x, y, n, layout);
  else
    silu_fwd_strided_loop<T, unsigned long long>(x, y, n, layout);
}

template <typename T>
__global__ void silu_bwd(const T* __restrict__ grad, const T* __restrict__ x,
                         T* __restrict__ grad_in, long long n) {
  for (long long i = mt::global_thread_index(); i < n; i += mt::grid_stride())
    grad_in[i] = mt::silu_grad_elem(grad[i], x[i]);
}

template <typename T, int UNROLL>
__global__ void silu_bwd_vec(const T* __restrict__ grad, const T* __restrict__ x,
                             T* __restrict__ grad_in, long long n) {
  using P = mt::Pack16<T>;
  const long long npack = n / P::size;
  const long long stride = mt::grid_stride();
  const P* gp = reinterpret_cast<const P*>(grad);
  const P* xp = reinterpret_cast<const P*>(x);
  P* op = reinterpret_cast<P*>(grad_in);
  for (long long base = mt::global_thread_index(); base < npack; base += stride * UNROLL) {
    P g[UNROLL] = {}, v[UNROLL] = {};
    MT_UNROLL
    for (int u = 0; u < UNROLL; ++u) {
      if (base + u * stride < npack) {
        g[u] = gp[base + u * stride];
        v[u] = xp[base + u * stride];
      }
    }
    MT_UNROLL
    for (int u = 0; u < UNROLL; ++u) {
      MT_UNROLL
      for (int k = 0; k < P::size; ++k) v[u].v[k] = mt::silu_grad_elem(g[u].v[k], v[u].v[k]);
    }
    MT_UNROLL
    for (int u = 0; u < UNROLL; ++u)
      if (base + u * stride < npack) op[base + u * stride] = v[u];
  }
  const long long tail = npack * P::size + mt::global_thread_index();
  if (tail < n) grad_in[tail] = mt::silu_grad_elem(grad[tail], x[tail]);
}

template <typename T, typename Index>
__device__ __forceinline__ void silu_bwd_strided_loop(const T* grad, const T* x, T* grad_in,
                                                      long long n, const mt::StridedLayout& l) {
  for (long long i = mt::global_thread_index(); i < n; i += mt::grid_stride()) {
    long long off[3];
    mt::strided_offsets<3>(l, (Index)i, off);
    grad_in[off[0]] = mt::silu_grad_elem(grad[off[1]], x[off[2]]);
  }
}

// layout.strides[0] belongs to grad_in, [1] to grad, [2] to x.
template <typename T>
__global__ void silu_bwd_strided(const T* grad, const T* x, T* grad_in, long long n,
                                 mt::StridedLayout layout) {
  if (n <= 0xffffffffLL)
    silu_bwd_strided_loop<T, unsigned>(grad, x, grad_in, n, layout);
  else
    silu_bwd_strided_loop<T, unsigned long long>(grad, x, grad_in, n, layout);
}
