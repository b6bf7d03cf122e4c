// SPDX-License-Identifier: MIT
// exp and sigmoid as a user writes them with SLEEF's AVX2 vector exp (Sleef_expf8_u10avx2,
// max error 1.0 ulp): e^x, and 1 / (1 + e^-x) with a division, 8 floats at a time. bench_cpu
// times them against the project's AVX2 loops (Note [AVX2 exp and sigmoid]; docs/cpu.md).
// Built with -mavx2 -mfma, where the build found SLEEF; call it only on a CPU with both.
#include <immintrin.h>
#include <sleef.h>

#include <cmath>
#include <cstdint>

void sleef_exp_avx2(float* o, const float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(o + i, Sleef_expf8_u10avx2(_mm256_loadu_ps(x + i)));
  for (; i < n; ++i) o[i] = std::exp(x[i]);
}

void sleef_sigmoid_avx2(float* o, const float* x, int64_t n) {
  int64_t i = 0;
  const __m256 one = _mm256_set1_ps(1.0f);
  for (; i + 8 <= n; i += 8) {
    const __m256 e =
        Sleef_expf8_u10avx2(_mm256_sub_ps(_mm256_setzero_ps(), _mm256_loadu_ps(x + i)));
    _mm256_storeu_ps(o + i, _mm256_div_ps(one, _mm256_add_ps(one, e)));
  }
  for (; i < n; ++i) o[i] = 1.0f / (1.0f + std::exp(-x[i]));
}
