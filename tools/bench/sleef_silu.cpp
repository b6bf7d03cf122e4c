// SPDX-License-Identifier: MIT
// SiLU as a user writes it with SLEEF's vector exp (Sleef_expf16_u10, max error 1.0 ulp):
// x / (1 + e^-x), 16 floats at a time. bench_cpu times it against the project's own loop
// (docs/cpu.md). Built with -mavx512f, where the build found SLEEF; call it only on a CPU
// with AVX-512F.
#include <immintrin.h>
#include <sleef.h>

#include <cmath>
#include <cstdint>

void sleef_silu(float* o, const float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    const __m512 e = Sleef_expf16_u10(_mm512_sub_ps(_mm512_setzero_ps(), v));
    _mm512_storeu_ps(o + i, _mm512_div_ps(v, _mm512_add_ps(_mm512_set1_ps(1.0f), e)));
  }
  for (; i < n; ++i) o[i] = x[i] / (1.0f + std::exp(-x[i]));
}
