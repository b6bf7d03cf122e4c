// Random numbers on the GPU from the runtime's counter-based generator: element i of a
// draw depends only on (seed, base + i), so the values are those mt::rand / mt::randn
// make on the CPU, whatever the launch configuration.
#include "common.cuh"

namespace mt {

// The same function as runtime/tensor.cpp's philox_like_hash (splitmix64 of the key).
__device__ __forceinline__ unsigned long long counter_hash(unsigned long long seed,
                                                           unsigned long long counter) {
  unsigned long long z =
      seed * 0x9E3779B97F4A7C15ull + counter * 0xD1B54A32D192ED03ull + 0x8CB92BA72F3D8DD7ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

__device__ __forceinline__ double uniform01(unsigned long long bits) {
  return double(bits >> 11) * (1.0 / 9007199254740992.0);  // 2^-53
}

template <typename T>
__device__ __forceinline__ T from_double(double v) {
  return store_compute<T>(compute_t<T>(v));
}

}  // namespace mt

template <typename T>
__global__ void random_uniform(T* out, long long n, unsigned long long seed,
                               unsigned long long base) {
  for (long long i = mt::global_thread_index(); i < n; i += mt::grid_stride())
    out[i] = mt::from_double<T>(mt::uniform01(mt::counter_hash(seed, base + (unsigned long long)i)));
}

// Box-Muller on counters base + 2i and base + 2i + 1.
template <typename T>
__global__ void random_normal(T* out, long long n, unsigned long long seed,
                              unsigned long long base) {
  for (long long i = mt::global_thread_index(); i < n; i += mt::grid_stride()) {
    const unsigned long long c = base + 2ull * (unsigned long long)i;
    const double u1 = mt::uniform01(mt::counter_hash(seed, c));
    const double u2 = mt::uniform01(mt::counter_hash(seed, c + 1));
    out[i] = mt::from_double<T>(sqrt(-2.0 * log1p(-u1)) * cos(6.283185307179586 * u2));
  }
}
