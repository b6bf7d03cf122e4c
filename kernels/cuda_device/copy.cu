// SPDX-License-Identifier: MIT
// Fill and copy-with-conversion on the GPU, for the runtime's device copies.
// Types: float, double, mt::Half, mt::BFloat16, long long (int64) and bool;
// conversions follow mt::convert in common.cuh. Grid-stride loops throughout.
#include "common.cuh"

template <typename T>
__global__ void fill(T* __restrict__ out, long long n, T value) {
  for (long long i = mt::global_thread_index(); i < n; i += mt::grid_stride()) out[i] = value;
}

template <typename T, typename Index>
__device__ __forceinline__ void fill_strided_loop(T* out, long long n, T value,
                                                  const mt::StridedLayout& l) {
  for (long long i = mt::global_thread_index(); i < n; i += mt::grid_stride()) {
    long long off[1];
    mt::strided_offsets<1>(l, (Index)i, off);
    out[off[0]] = value;
  }
}

// layout.strides[0] belongs to out.
template <typename T>
__global__ void fill_strided(T* out, long long n, T value, mt::StridedLayout layout) {
  if (n <= 0xffffffffLL)
    fill_strided_loop<T, unsigned>(out, n, value, layout);
  else
    fill_strided_loop<T, unsigned long long>(out, n, value, layout);
}

// Both contiguous.
template <typename Dst, typename Src>
__global__ void copy_cast(Dst* __restrict__ dst, const Src* __restrict__ src, long long n) {
  for (long long i = mt::global_thread_index(); i < n; i += mt::grid_stride())
    dst[i] = mt::convert<Dst>(src[i]);
}

// Note [Vector casts]
// Both contiguous, and both aligned to their packs (the host checks; copy_cast otherwise):
// K elements a thread an iteration, K = 16 bytes of the narrower type (at most 8), so each
// side moves at least 8 bytes and the narrow side 16 in one instruction (the wide side in
// two: a float32 -> bfloat16 cast reads 2 x 16 bytes and writes 16). Two packs a thread
// are in flight, as in the SiLU kernels (Note [SiLU's launch shape]); the grid is one
// block per 256 packs / 2, and the n % K tail goes to the grid's first threads. A scalar
// cast moved 2 TB/s where torch's vectorized one moved 2.7 (float32 to bfloat16 at 2^24,
// H100, docs/results/2026-12-07-h100-autocast-kernels-2.json).
template <typename T, int K>
struct alignas(sizeof(T) * K < 16 ? sizeof(T) * K : 16) CastPack {
  T v[K];
};
template <typename Dst, typename Src>
__global__ void copy_cast_vec(Dst* __restrict__ dst, const Src* __restrict__ src, long long n) {
  constexpr int narrow = sizeof(Dst) < sizeof(Src) ? sizeof(Dst) : sizeof(Src);
  constexpr int K = 16 / narrow < 8 ? 16 / narrow : 8;
  constexpr int UNROLL = 2;
  using SP = CastPack<Src, K>;
  using DP = CastPack<Dst, K>;
  const long long npack = n / K;
  const long long stride = mt::grid_stride();
  const SP* sp = reinterpret_cast<const SP*>(src);
  DP* dp = reinterpret_cast<DP*>(dst);
  for (long long base = mt::global_thread_index(); base < npack; base += stride * UNROLL) {
    SP in[UNROLL] = {};
    MT_UNROLL
    for (int u = 0; u < UNROLL; ++u)
      if (base + u * stride < npack) in[u] = sp[base + u * stride];
    MT_UNROLL
    for (int u = 0; u < UNROLL; ++u) {
      if (base + u * stride >= npack) continue;
      DP out;
      MT_UNROLL
      for (int k = 0; k < K; ++k) out.v[k] = mt::convert<Dst>(in[u].v[k]);
      dp[base + u * stride] = out;
    }
  }
  const long long tail = npack * K + mt::global_thread_index();
  if (tail < n) dst[tail] = mt::convert<Dst>(src[tail]);
}

template <typename Dst, typename Src, typename Index>
__device__ __forceinline__ void copy_cast_strided_loop(Dst* dst, const Src* src, long long n,
                                                       const mt::StridedLayout& l) {
  for (long long i = mt::global_thread_index(); i < n; i += mt::grid_stride()) {
    long long off[2];
    mt::strided_offsets<2>(l, (Index)i, off);
    dst[off[0]] = mt::convert<Dst>(src[off[1]]);
  }
}

// Any strides on either side (a contiguous dst has row-major strides);
// layout.strides[0] belongs to dst, [1] to src.
template <typename Dst, typename Src>
__global__ void copy_cast_strided(Dst* dst, const Src* src, long long n, mt::StridedLayout layout) {
  if (n <= 0xffffffffLL)
    copy_cast_strided_loop<Dst, Src, unsigned>(dst, src, n, layout);
  else
    copy_cast_strided_loop<Dst, Src, unsigned long long>(dst, src, n, layout);
}
