// SPDX-License-Identifier: MIT
// softmax and log_softmax along the last dim of a contiguous [rows, n] input, numerically
// stable: a block per row finds the row's max, then sum(exp(x - max)), then writes
// exp(x - max) / sum or x - max - log(sum). Math in float (double for double).
#if defined(__CUDACC_RTC__) || defined(__CUDACC__)
#include "common.cuh"  // kernels/cuda_device/common.cuh, embedded by its file name like this one
#else
#include "kernels/cuda_device/common.cuh"  // the tests' CPU emulation compiles this file as host C++
#endif

namespace mt {

// Combines one value per thread across the block (blockDim.x a multiple of 32, at most
// 1024); every thread gets the result. `scratch` holds 32 values; `identity` fills the
// lanes past the block's warp count.
template <typename C, typename F>
__device__ __forceinline__ C block_all_reduce(C v, C identity, C* scratch, F join) {
  MT_UNROLL
  for (int d = 16; d > 0; d /= 2) v = join(v, __shfl_xor_sync(0xffffffffu, v, d));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  __syncthreads();  // scratch may still be read from the previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : identity;
  MT_UNROLL
  for (int d = 16; d > 0; d /= 2) v = join(v, __shfl_xor_sync(0xffffffffu, v, d));
  return v;
}

template <typename C>
__device__ __forceinline__ C max_nan(C a, C b) {
  return a != a ? a : (b != b ? b : (a > b ? a : b));
}

}  // namespace mt

template <typename T, bool Log>
__global__ void softmax_rows(const T* __restrict__ x, T* __restrict__ y, long long rows,
                             long long n) {
  using C = mt::compute_t<T>;
  __shared__ C scratch[32];
  for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * n;
    T* yr = y + row * n;
    C m = mt::lowest_value<C>();
    for (long long j = threadIdx.x; j < n; j += blockDim.x)
      m = mt::max_nan(m, mt::load_compute(xr[j]));
    m = mt::block_all_reduce(m, mt::lowest_value<C>(), scratch,
                             [](C a, C b) { return mt::max_nan(a, b); });
    C s = C(0);
    for (long long j = threadIdx.x; j < n; j += blockDim.x)
      s += mt::exp_(mt::load_compute(xr[j]) - m);
    s = mt::block_all_reduce(s, C(0), scratch, [](C a, C b) { return a + b; });
    if constexpr (Log) {
      const C shift = m + mt::log_(s);
      for (long long j = threadIdx.x; j < n; j += blockDim.x)
        yr[j] = mt::store_compute<T>(mt::load_compute(xr[j]) - shift);
    } else {
      const C inv = C(1) / s;
      for (long long j = threadIdx.x; j < n; j += blockDim.x)
        yr[j] = mt::store_compute<T>(mt::exp_(mt::load_compute(xr[j]) - m) * inv);
    }
  }
}
