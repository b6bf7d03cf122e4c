// SPDX-License-Identifier: MIT
// Random numbers on the GPU from the runtime's counter-based generator, Philox4x32-10
// (runtime/philox.h, Note [The random stream]): element i of a draw depends only on
// (seed, base + i), so the values are those mt::rand / mt::randn make on the CPU,
// whatever the launch configuration.
#include "common.cuh"
#if defined(__CUDACC_RTC__) || defined(__CUDACC__)
#include "philox.h"  // runtime/philox.h, embedded beside this file
#else
#include "runtime/philox.h"  // the tests' CPU emulation compiles this file as host C++
#endif

namespace mt {

template <typename T>
__device__ __forceinline__ T from_double(double v) {
  return store_compute<T>(compute_t<T>(v));
}

}  // namespace mt

// As many high bits as T's significand holds, so the value is exact in T and below 1
// (the host's rand takes the same bits).
template <typename T>
__global__ void random_uniform(T* out, long long n, unsigned long long seed,
                               unsigned long long base) {
  const int bits = mt::philox_uniform_bits(int(sizeof(T)), mt::is_same_v<T, mt::BFloat16>);
  for (long long i = mt::global_thread_index(); i < n; i += mt::grid_stride()) {
    const mt::Philox4x32 r = mt::philox_block(seed, base + (unsigned long long)i);
    out[i] = mt::from_double<T>(mt::philox_uniform(r.v[0], r.v[1], bits));
  }
}

// Box-Muller on the two 64-bit halves of counter base + i's block.
template <typename T>
__global__ void random_normal(T* out, long long n, unsigned long long seed,
                              unsigned long long base) {
  for (long long i = mt::global_thread_index(); i < n; i += mt::grid_stride()) {
    const mt::Philox4x32 r = mt::philox_block(seed, base + (unsigned long long)i);
    const double u1 = mt::philox_uniform01(r.v[0], r.v[1]);
    const double u2 = mt::philox_uniform01(r.v[2], r.v[3]);
    out[i] = mt::from_double<T>(sqrt(-2.0 * log1p(-u1)) * cos(6.283185307179586 * u2));
  }
}
