// SPDX-License-Identifier: MIT
// The float32 loops of exp, sigmoid, SiLU and SiLU's backward: AVX-512 where the CPU has it,
// the portable ISA-clone loops (kernels/cpu/math.h) elsewhere.
#include "kernels/cpu/vec_exp.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "kernels/cpu/loops.h"
#include "kernels/cpu/math.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(MT_NO_ISA_CLONES)
#define MT_HAVE_AVX512_EXP 1
#define MT_HAVE_AVX2_EXP 1
// GCC 12's AVX-512 headers start some intrinsics from _mm512_undefined_ps(), which
// -Wmaybe-uninitialized reports at every use (GCC bug 105593); the value is never read.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#else
#define MT_HAVE_AVX512_EXP 0
#define MT_HAVE_AVX2_EXP 0
#endif

namespace mt::cpu {
namespace {

// ---- the portable loops: one per op, compiled per ISA (Note [ISA clones]) ----------------

MT_ISA_CLONES void exp_portable(float* o, const float* x, int64_t n) {
  MT_SIMD for (int64_t i = 0; i < n; ++i) o[i] = exp_f32(x[i]);
}
MT_ISA_CLONES void exp_neg_portable(float* o, const float* x, int64_t n) {
  MT_SIMD for (int64_t i = 0; i < n; ++i) o[i] = exp_f32(-x[i]);
}
MT_ISA_CLONES void div_c_plus_exp_neg_portable(float* o, const float* x, float c, int64_t n) {
  MT_SIMD for (int64_t i = 0; i < n; ++i) o[i] = x[i] / (c + exp_f32(-x[i]));
}
MT_ISA_CLONES void sigmoid_portable(float* o, const float* x, int64_t n) {
  MT_SIMD for (int64_t i = 0; i < n; ++i) o[i] = sigmoid_of(x[i]);
}
// The product is rounded to float first; nothing reads it but a bit cast, so it is not
// contracted into an FMA.
MT_ISA_CLONES void sigmoid_mul_c_portable(float* o, const float* x, float c, int64_t n) {
  MT_SIMD for (int64_t i = 0; i < n; ++i) o[i] = sigmoid_of(float(x[i] * c));
}
MT_ISA_CLONES void exp_mul_c_portable(float* o, const float* x, float c, int64_t n) {
  MT_SIMD for (int64_t i = 0; i < n; ++i) o[i] = exp_f32(float(x[i] * c));
}
MT_ISA_CLONES void silu_portable(float* o, const float* x, int64_t n) {
  MT_SIMD for (int64_t i = 0; i < n; ++i) o[i] = silu_of(x[i]);
}
void gelu_portable(float* o, const float* x, int64_t n) {  // libm's tanh: scalar anyway
  for (int64_t i = 0; i < n; ++i) o[i] = gelu_of(x[i]);
}
// exp_f32_sat: a NaN x makes s a number, but x * (1 - s) is NaN.
MT_ISA_CLONES void silu_backward_portable(float* o, const float* g, const float* x, int64_t n) {
  MT_SIMD for (int64_t i = 0; i < n; ++i) {
    const float s = 1.0f / (1.0f + exp_f32_sat(-x[i]));
    o[i] = g[i] * s * (1.0f + x[i] * (1.0f - s));
  }
}

#if MT_HAVE_AVX512_EXP
#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,fma")

// Note [AVX-512 exp]
// glibc's expf is scalar, and the portable exp_f32 of math.h, vectorized by GCC, pays for
// what GCC cannot use under the project's flags (-std=c++20 turns off FMA contraction) and
// for a full division. These loops are written with AVX-512 intrinsics instead:
//  - e^t for t <= 0 (GELU's sigmoid needs only e^-|w|): Cody-Waite reduction
//    t = n ln2 + r, |r| <= ln2/2, with n = round(t log2 e); e^r = 1 + r (1 + r P(r)), P of
//    degree 4, all in FMAs; 2^n applied by vscalefps, which goes into subnormals and to
//    zero as the true result rounds (t is clamped at -150).
//  - z = e^-|w| is in (0, 1], so 1 + z is in [1, 2]: its reciprocal is vrcp14ps (relative
//    error below 2^-14) and one Newton step (below 2^-27); no division, no overflow.
//  - sigmoid(w) = 1/(1+z) for w >= 0 and z/(1+z) below, so it loses no digits to
//    cancellation; GELU's x sigmoid(w) for w < 0 is computed as (x r P) 2^n, so a
//    subnormal result is rounded once.
//  - SiLU, its backward and sigmoid take another road with fewer multiplies (Note [SiLU
//    over 2^fl + m]).
//  - exp itself: n from x clamped to [-104, 89] (below rounds to 0, above is inf), the
//    same polynomial, scalef for 2^n.
// NaN in gives NaN out (the clamps pass a NaN x on: vrangeps does, and vminps/vmaxps are
// ordered so that they do), and
// the infinities give what x / (1 + exp(-x)) gives in IEEE arithmetic, as the portable and
// CUDA kernels do: silu(+inf) = inf, silu(-inf) = NaN, sigmoid(+-inf) = 1, 0.
// Max error against float64 over tests/test_cpu_kernels.cpp's sweep (every float32 exponent,
// subnormals, +-inf, NaN): see the test for the bound it checks.
using V = __m512;

inline V vset(float v) { return _mm512_set1_ps(v); }

// e^r for |r| <= ln2/2: 1 + r + r^2 P(r), as 1 + r (1 + r P(r)), P of degree 4: the
// interpolant of (e^r - 1 - r) / r^2 at 5 Chebyshev nodes, its float coefficients 0.08 ulp
// from e^r at worst (Cephes' degree 5 P, one FMA more, is far below float's rounding too).
[[gnu::always_inline]] inline V exp_reduced(V r) {
  V p = vset(1.3926176120e-3f);
  p = _mm512_fmadd_ps(p, r, vset(8.3631730745e-3f));
  p = _mm512_fmadd_ps(p, r, vset(4.1666554662e-2f));
  p = _mm512_fmadd_ps(p, r, vset(1.6666577026e-1f));
  p = _mm512_fmadd_ps(p, r, vset(0.5f));
  p = _mm512_fmadd_ps(p, r, vset(1.0f));
  return _mm512_fmadd_ps(p, r, vset(1.0f));
}

// t = n ln2 + r: n = round(t log2 e) (adding and taking away 1.5 * 2^23 rounds to an
// integer; one uop less than vrndscaleps), r by Cody-Waite in two steps (ln2's high part
// has 9 significant bits, so n * hi is exact for |n| < 2^15).
[[gnu::always_inline]] inline V reduce(V t, V& n) {
  n = _mm512_sub_ps(_mm512_fmadd_ps(t, vset(1.44269504088896341f), vset(12582912.0f)),
                    vset(12582912.0f));
  V r = _mm512_fnmadd_ps(n, vset(0.693359375f), t);
  return _mm512_fnmadd_ps(n, vset(-2.12194440e-4f), r);
}

// The parts every sigmoid-like op needs, for 16 lanes of x: z = e^-|x| as p 2^n, the
// reciprocal of 1 + z, and the mask of the negative lanes.
struct SigmoidParts {
  V p, n, z, rcp;
  __mmask16 neg;
};
// limit: where -|x| is clamped (e^-150 is far below the smallest subnormal; GELU's x z
// needs z right down to there). vrangeps' min of |x| and limit, sign set, is -min(|x|,
// limit) in one uop, but it drops a NaN (it returns the other operand, as measured on
// this VM's Xeon): only for ops whose result takes x itself as a factor, which carries the
// NaN. Otherwise two uops: max(c, NaN) is NaN (vmaxps returns its second operand then).
template <bool kXCarriesNaN = false>
[[gnu::always_inline]] inline SigmoidParts sigmoid_parts(V x, float limit = 150.0f) {
  SigmoidParts s;
  const V t = kXCarriesNaN ? _mm512_range_ps(x, vset(limit), 0x0E)
                           : _mm512_max_ps(vset(-limit), _mm512_or_ps(x, vset(-0.0f)));
  s.p = exp_reduced(reduce(t, s.n));
  s.z = _mm512_scalef_ps(s.p, s.n);
  const V d = _mm512_add_ps(s.z, vset(1.0f));
  const V r0 = _mm512_rcp14_ps(d);
  s.rcp = _mm512_fmadd_ps(r0, _mm512_fnmadd_ps(d, r0, vset(1.0f)), r0);
  s.neg = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ);
  return s;
}

[[gnu::always_inline]] inline V exp16(V x) {
  // min(c, NaN) and max(c, NaN) are NaN: the clamps pass a NaN on.
  const V t = _mm512_max_ps(vset(-104.0f), _mm512_min_ps(vset(89.0f), x));
  V n;
  const V p = exp_reduced(reduce(t, n));
  return _mm512_scalef_ps(p, n);
}

// Note [SiLU over 2^fl + m]
// SiLU itself takes another road than sigmoid_parts, one with fewer multiplies, which are
// what bounds these loops (docs/cpu.md: on Zen 4 every FMA, multiply and vrcp14ps goes to
// one pair of pipes, one zmm op a cycle). With a = x log2(e) rounded to 1/16, a = fl + j/16
// (fl = floor(a)), and r = a ln2 - x (Cody-Waite, |r| <= ln2/32):
//   e^-x = 2^-fl m, m = 2^(-j/16) e^r,  so  1 + e^-x = 2^-fl (2^fl + m)
//   silu(x) = x / (1 + e^-x) = [x / (2^fl + m)] 2^fl
// One reciprocal serves both signs: no sign mask, no select, and 2^fl + m does not cancel.
//  - 2^(-j/16) is a 16-entry table in one register, read by vpermps with the low 4 bits of
//    k = x log2(e) + 1.5 2^19 (its ulp is 1/16, so those bits are j); e^r is
//    1 + r + r^2/2 + r^3/6 (the rest is below r^4/24 < 1e-8 relative).
//  - 2^fl is vscalefps(1, a): it floors its exponent operand (0 below 2^-149). The last
//    vscalefps applies 2^fl to x / (2^fl + m), so a subnormal result is rounded once.
//  - x is clamped to [-199.63, 87] for a only; x itself stays the numerator. At 87, 2^fl =
//    2^125 and 1/(2^fl + m) is still normal (vrcp14ps gives no subnormals). At -199.63, a =
//    -288 exactly with r >= 0, so m >= 1, x / m cannot overflow, and x 2^-288 rounds to 0
//    for every float x, as x e^x does from about -108.7 on.
//  - NaN in: x is the numerator. +inf: inf. -inf: the last exponent is min(a, x + 40),
//    which is a for every finite x here (x + 40 > a: 40 > 0.4427 x + 1/32 for x <= 87) and
//    -inf for x = -inf, and vscalefps(-inf, -inf) is NaN, as x / (1 + e^-x) gives.
// Max error against float64: 2.57 ulp over tests/test_cpu_kernels.cpp's sweep and 2.85
// over every 97th float, against 2.69 and 3.37 for the sigmoid_parts form it replaced
// (which still serves sigmoid and GELU). The backward builds on the same parts.
// The steps are written one at a time for U vectors (each for all U before the next): the
// chain of one vector is about 45 cycles long, and GCC keeps the order it is given.
alignas(64) constexpr float kExp2NegSixteenths[16] = {  // 2^(-j/16), rounded to float
    1.0f,         0.957603276f, 0.917004049f, 0.878126085f, 0.840896428f, 0.805245161f,
    0.771105409f, 0.738413095f, 0.707106769f, 0.677127779f, 0.648419797f, 0.620928884f,
    0.594603539f, 0.56939429f,  0.545253873f, 0.522136867f};

// kExp2NegSixteenths times 2^64 (sigmoid_vectors' s / (s + m')).
alignas(64) constexpr float kExp2NegSixteenths64[16] = {
    0x1p64f * 1.0f,         0x1p64f * 0.957603276f, 0x1p64f * 0.917004049f, 0x1p64f * 0.878126085f,
    0x1p64f * 0.840896428f, 0x1p64f * 0.805245161f, 0x1p64f * 0.771105409f, 0x1p64f * 0.738413095f,
    0x1p64f * 0.707106769f, 0x1p64f * 0.677127779f, 0x1p64f * 0.648419797f, 0x1p64f * 0.620928884f,
    0x1p64f * 0.594603539f, 0x1p64f * 0.56939429f,  0x1p64f * 0.545253873f, 0x1p64f * 0.522136867f};

#define MT_EACH_VECTOR _Pragma("GCC unroll 8") for (int u = 0; u < U; ++u)
// The parts both SiLU loops share, for U vectors: xc (x clamped for the exponent), a =
// fl + j/16, m = 2^(-j/16) e^r (where kWantM; the forward adds 2^fl into the last FMA
// instead, one rounding fewer) and rc = 1 / (2^fl + m). tab holds kExp2NegSixteenths.
template <int U>
struct SiluParts {
  V xc[U], a[U], m[U], rc[U];
};
template <bool kWantM, int U>
[[gnu::always_inline]] inline void silu_parts(const V (&x)[U], V tab, SiluParts<U>& s) {
  const V shift = vset(786432.0f);  // 1.5 2^19
  V r[U], p[U], q[U], d[U];
  MT_EACH_VECTOR s.xc[u] = _mm512_max_ps(_mm512_min_ps(x[u], vset(87.0f)), vset(-199.63f));
  MT_EACH_VECTOR s.a[u] = _mm512_fmadd_ps(s.xc[u], vset(1.44269504088896341f), shift);  // k
  MT_EACH_VECTOR s.m[u] = _mm512_permutexvar_ps(_mm512_castps_si512(s.a[u]), tab);      // 2^(-j/16)
  MT_EACH_VECTOR s.a[u] = _mm512_sub_ps(s.a[u], shift);                                 // fl + j/16
  MT_EACH_VECTOR r[u] = _mm512_fmsub_ps(s.a[u], vset(0.693359375f), s.xc[u]);  // a ln2_hi exact
  MT_EACH_VECTOR p[u] = _mm512_scalef_ps(vset(1.0f), s.a[u]);                  // 2^fl
  MT_EACH_VECTOR r[u] = _mm512_fmadd_ps(s.a[u], vset(-2.12194440e-4f), r[u]);  // + a ln2_lo
  MT_EACH_VECTOR q[u] = _mm512_fmadd_ps(r[u], vset(1.0f / 6), vset(0.5f));
  MT_EACH_VECTOR q[u] = _mm512_fmadd_ps(q[u], r[u], vset(1.0f));
  if constexpr (kWantM) {
    MT_EACH_VECTOR r[u] = _mm512_mul_ps(s.m[u], r[u]);
    MT_EACH_VECTOR s.m[u] = _mm512_fmadd_ps(r[u], q[u], s.m[u]);  // 2^(-j/16) e^r
    MT_EACH_VECTOR d[u] = _mm512_add_ps(s.m[u], p[u]);            // 2^fl + m
  } else {
    MT_EACH_VECTOR p[u] = _mm512_add_ps(s.m[u], p[u]);
    MT_EACH_VECTOR r[u] = _mm512_mul_ps(s.m[u], r[u]);
    MT_EACH_VECTOR d[u] = _mm512_fmadd_ps(r[u], q[u], p[u]);  // 2^fl + 2^(-j/16) e^r
  }
  MT_EACH_VECTOR s.rc[u] = _mm512_rcp14_ps(d[u]);
  MT_EACH_VECTOR d[u] = _mm512_fnmadd_ps(d[u], s.rc[u], vset(1.0f));
  MT_EACH_VECTOR s.rc[u] = _mm512_fmadd_ps(s.rc[u], d[u], s.rc[u]);  // one Newton step
}

// x[u] = silu(x[u]) = [x rc] 2^fl for U vectors.
template <int U>
[[gnu::always_inline]] inline void silu_vectors(V (&x)[U], V tab) {
  SiluParts<U> s;
  silu_parts<false>(x, tab, s);
  MT_EACH_VECTOR s.a[u] = _mm512_min_ps(s.a[u], _mm512_add_ps(x[u], vset(40.0f)));  // -inf
  MT_EACH_VECTOR x[u] = _mm512_scalef_ps(_mm512_mul_ps(x[u], s.rc[u]), s.a[u]);
}

// x[u] = sigmoid(x[u]) for U vectors, as s / (s + m') (Note [AVX2 exp and sigmoid], with
// 16 entries and e^r of degree 3 as in silu_parts): s = 2^(fl + 64), m' = 2^64 m (tab64
// holds kExp2NegSixteenths times 2^64), x clamped to [-104, 20] for the exponent only. The
// quotient is s times the reciprocal of s + m' (vrcp14ps and one Newton step, 2^-28 off):
// both are normal floats for every x, and the last product rounds a subnormal result once.
// NaN: the clamps pass it on (vminps/vmaxps return their second operand), and so do scalef,
// the sum and the product. +-inf: 1 and 0, from the clamps.
template <int U>
[[gnu::always_inline]] inline void sigmoid_vectors(V (&x)[U], V tab64) {
  const V shift = vset(786432.0f);  // 1.5 2^19: its ulp is 1/16
  V xc[U], a[U], t[U], r[U], q[U], d[U], rc[U];
  MT_EACH_VECTOR xc[u] = _mm512_max_ps(vset(-104.0f), _mm512_min_ps(vset(20.0f), x[u]));
  MT_EACH_VECTOR a[u] = _mm512_fmadd_ps(xc[u], vset(1.44269504088896341f), shift);  // k
  MT_EACH_VECTOR t[u] = _mm512_permutexvar_ps(_mm512_castps_si512(a[u]), tab64);
  MT_EACH_VECTOR a[u] = _mm512_sub_ps(a[u], shift);                          // fl + j/16
  MT_EACH_VECTOR r[u] = _mm512_fmsub_ps(a[u], vset(0.693359375f), xc[u]);    // a ln2_hi exact
  MT_EACH_VECTOR x[u] = _mm512_scalef_ps(vset(0x1p64f), a[u]);               // s = 2^(fl + 64)
  MT_EACH_VECTOR r[u] = _mm512_fmadd_ps(a[u], vset(-2.12194440e-4f), r[u]);  // + a ln2_lo
  MT_EACH_VECTOR q[u] = _mm512_fmadd_ps(r[u], vset(1.0f / 24), vset(1.0f / 6));
  MT_EACH_VECTOR q[u] = _mm512_fmadd_ps(q[u], r[u], vset(0.5f));
  MT_EACH_VECTOR q[u] = _mm512_fmadd_ps(q[u], r[u], vset(1.0f));
  MT_EACH_VECTOR r[u] = _mm512_mul_ps(t[u], r[u]);
  MT_EACH_VECTOR d[u] = _mm512_fmadd_ps(r[u], q[u], t[u]);  // m' = 2^64 2^(-j/16) e^r
  MT_EACH_VECTOR d[u] = _mm512_add_ps(x[u], d[u]);          // s + m'
  MT_EACH_VECTOR rc[u] = _mm512_rcp14_ps(d[u]);
  MT_EACH_VECTOR d[u] = _mm512_fnmadd_ps(d[u], rc[u], vset(1.0f));
  MT_EACH_VECTOR rc[u] = _mm512_fmadd_ps(rc[u], d[u], rc[u]);  // one Newton step
  MT_EACH_VECTOR x[u] = _mm512_mul_ps(x[u], rc[u]);
}

// g[u] = g silu'(x) = g s (1 + x (1 - s)) for U vectors, with s = 2^fl rc (vscalefps: exact
// but where s is subnormal) and 1 - s = m rc: neither cancels. g s is formed before the
// product with 1 + x (1 - s), so no g underflows or overflows where the result does not
// (scaling g rc by 2^fl last would lose a small g at large x, where rc is near 2^-125).
// xc for x: above 87, xc m rc is below 2^-118, and the true x (1 - s) is below 2^-100 up to
// x = 2^20 and 0 in float beyond, so either is nothing next to 1 (x m rc would not be, past
// x = 2^94). Infinities: x (1 - s) or s (1 + x) is inf * 0 in the formula, so NaN, and
// vfixupimmps makes it so (token 3, the default NaN, for the classes +inf and -inf; token 1,
// x itself, for a quiet NaN x, which xc lost; token 2, x quieted, for a signalling one).
template <int U>
[[gnu::always_inline]] inline void silu_backward_vectors(V (&g)[U], const V (&x)[U], V tab) {
  SiluParts<U> s;
  silu_parts<true>(x, tab, s);
  V t[U];
  MT_EACH_VECTOR t[u] = _mm512_mul_ps(s.m[u], s.rc[u]);              // 1 - s
  MT_EACH_VECTOR s.rc[u] = _mm512_scalef_ps(s.rc[u], s.a[u]);        // s
  MT_EACH_VECTOR t[u] = _mm512_fmadd_ps(s.xc[u], t[u], vset(1.0f));  // 1 + x (1 - s)
  MT_EACH_VECTOR t[u] = _mm512_mul_ps(_mm512_mul_ps(g[u], s.rc[u]), t[u]);
  MT_EACH_VECTOR g[u] = _mm512_fixupimm_ps(t[u], x[u], _mm512_set1_epi32(0x330021), 0);
}
#undef MT_EACH_VECTOR

// GELU's tanh form is x sigmoid(w) with w = 2 sqrt(2/pi) (x + 0.044715 x^3), since
// (1 + tanh(u)) / 2 = sigmoid(2u): the same parts as silu with w for the argument, and no
// 1 + tanh(u) to cancel for negative x. Where w < -150 the product is x times 0 (NaN for
// x = -inf, as the tanh form gives).
[[gnu::always_inline]] inline V gelu16(V x) {
  const V w = _mm512_mul_ps(x, _mm512_fmadd_ps(_mm512_mul_ps(x, x), vset(0.07135481627260025f),
                                               vset(1.5957691216057308f)));
  const SigmoidParts s = sigmoid_parts<true>(w);
  V y = _mm512_mul_ps(x, s.rcp);
  y = _mm512_mask_mul_ps(y, s.neg, y, s.p);
  y = _mm512_mask_scalef_ps(y, s.neg, y, s.n);
  const __mmask16 far = _mm512_cmp_ps_mask(w, vset(-150.0f), _CMP_LT_OQ);
  return _mm512_mask_mul_ps(y, far, x, _mm512_setzero_ps());
}

// Runs f over 16 lanes at a time, the tail under a mask (masked loads do not fault past it).
template <typename F>
[[gnu::always_inline]] inline void unary_loop(float* o, const float* x, int64_t n, F f) {
  int64_t i = 0;
  // Four vectors an iteration: the chains are long (one vector at a time was 12% slower
  // for silu in cache, two 2% slower than four, measured with rdtsc on this VM's Xeon).
  for (; i + 64 <= n; i += 64) {
    const V a = f(_mm512_loadu_ps(x + i)), b = f(_mm512_loadu_ps(x + i + 16));
    const V c = f(_mm512_loadu_ps(x + i + 32)), d = f(_mm512_loadu_ps(x + i + 48));
    _mm512_storeu_ps(o + i, a);
    _mm512_storeu_ps(o + i + 16, b);
    _mm512_storeu_ps(o + i + 32, c);
    _mm512_storeu_ps(o + i + 48, d);
  }
  for (; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(o + i, m, f(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

void exp_avx512(float* o, const float* x, int64_t n) { unary_loop(o, x, n, exp16); }
[[gnu::always_inline]] inline V exp_neg16(V x) { return exp16(_mm512_xor_ps(x, vset(-0.0f))); }
void exp_neg_avx512(float* o, const float* x, int64_t n) { unary_loop(o, x, n, exp_neg16); }
void gelu_avx512(float* o, const float* x, int64_t n) { unary_loop(o, x, n, gelu16); }
// The same exp as exp_neg_avx512, then the add and the division, each rounded as its own loop
// would round it.
void div_c_plus_exp_neg_avx512(float* o, const float* x, float c, int64_t n) {
  const V cv = vset(c);
  unary_loop(o, x, n, [cv](V v) { return _mm512_div_ps(v, _mm512_add_ps(cv, exp_neg16(v))); });
}
// Runs f(v, tab) over U vectors at a time, then one vector at a time, the tail under a mask.
template <int U, typename F>
[[gnu::always_inline]] inline void unary_parts_loop(float* o, const float* x, int64_t n, F f,
                                                    const float* table = kExp2NegSixteenths) {
  const V tab = _mm512_load_ps(table);
  int64_t i = 0;
  for (; i + 16 * U <= n; i += 16 * U) {
    V v[U];
    for (int u = 0; u < U; ++u) v[u] = _mm512_loadu_ps(x + i + 16 * u);
    f(v, tab);
    for (int u = 0; u < U; ++u) _mm512_storeu_ps(o + i + 16 * u, v[u]);
  }
  for (; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - i)) - 1);
    V v[1] = {_mm512_maskz_loadu_ps(m, x + i)};
    f(v, tab);
    _mm512_mask_storeu_ps(o + i, m, v[0]);
  }
}
void sigmoid_avx512(float* o, const float* x, int64_t n) {
  unary_parts_loop<6>(
      o, x, n, [](auto& v, V tab) { sigmoid_vectors(v, tab); }, kExp2NegSixteenths64);
}
void sigmoid_mul_c_avx512(float* o, const float* x, float c, int64_t n) {
  const V cv = vset(c);
  unary_parts_loop<6>(
      o, x, n,
      [cv](auto& v, V tab) {
        for (V& e : v) e = _mm512_mul_ps(e, cv);
        sigmoid_vectors(v, tab);
      },
      kExp2NegSixteenths64);
}
void exp_mul_c_avx512(float* o, const float* x, float c, int64_t n) {
  const V cv = vset(c);
  unary_loop(o, x, n, [cv](V v) { return exp16(_mm512_mul_ps(v, cv)); });
}
// Six vectors an iteration: 9.0 rdtsc ticks per 16 floats on this project's Zen 4 VM,
// against 9.9 for four written one vector after the other (docs/cpu.md).
void silu_avx512(float* o, const float* x, int64_t n) {
  unary_parts_loop<6>(o, x, n, [](auto& v, V tab) { silu_vectors(v, tab); });
}
// Four vectors an iteration (six spill more registers here): 13.4 rdtsc ticks per 16
// floats on the Zen 4 VM, against 15.8 for sigmoid_parts one vector at a time.
void silu_backward_avx512(float* o, const float* g, const float* x, int64_t n) {
  constexpr int U = 4;
  const V tab = _mm512_load_ps(kExp2NegSixteenths);
  int64_t i = 0;
  for (; i + 16 * U <= n; i += 16 * U) {
    V gv[U], xv[U];
    for (int u = 0; u < U; ++u)
      gv[u] = _mm512_loadu_ps(g + i + 16 * u), xv[u] = _mm512_loadu_ps(x + i + 16 * u);
    silu_backward_vectors(gv, xv, tab);
    for (int u = 0; u < U; ++u) _mm512_storeu_ps(o + i + 16 * u, gv[u]);
  }
  for (; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - i)) - 1);
    V gv[1] = {_mm512_maskz_loadu_ps(m, g + i)};
    const V xv[1] = {_mm512_maskz_loadu_ps(m, x + i)};
    silu_backward_vectors(gv, xv, tab);
    _mm512_mask_storeu_ps(o + i, m, gv[0]);
  }
}

#pragma GCC pop_options

bool cpu_has_avx512() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
}
#else
bool cpu_has_avx512() { return false; }
#endif

#if MT_HAVE_AVX2_EXP
#pragma GCC push_options
#pragma GCC target("avx2,fma")

// Note [AVX2 exp and sigmoid]
// On a CPU with AVX2 and FMA but no AVX-512 (Zen 3, many laptops), exp and sigmoid (and the
// tile evaluator's folded forms of them) run these loops instead of the portable ones: GCC
// vectorizes those without FMAs (-std=c++20 turns contraction off) and with integer clamps
// and a full division around an exp whose 2^n is two factors.
//  - exp: the AVX-512 loops' algorithm (Note [AVX-512 exp]): x clamped to [-104, 89] (min
//    and max ordered so that a NaN passes), n = round(x log2 e), r by Cody-Waite in two FMAs,
//    e^r = 1 + r (1 + r P(r)) with the same degree-4 P. AVX2 has no vscalefps, so 2^n
//    (n in [-150, 129]) is two factors 2^n1 2^n2, n1 = n >> 1: p 2^n1 is exact (p in [0.7,
//    1.5], n1 >= -75) and the second product rounds once, as vscalefps does.
//  - sigmoid: the parts of Note [SiLU over 2^fl + m] with an 8-entry table (vpermps reads
//    8 lanes): a = x log2(e) rounded to 1/8 = fl + j/8, r = a ln2 - x (|r| <= ln2/16),
//    m = 2^(-j/8) e^r, e^r = 1 + r + r^2/2 + r^3/6 + r^4/24 (the rest is below r^5/120 <
//    1.3e-9 relative; degree 3 measured 3.85 ulp). Then sigmoid(x) = 2^fl / (2^fl + m), and
//    with both terms scaled by 2^64, s = 2^(fl + 64) and m' = 2^64 m (the table holds
//    2^64 2^(-j/8): the same roundings), s / (s + m') is one division of two normal floats
//    for every x in the clamp: the quotient rounds once, into the subnormals too, with no
//    second factor and no masks. s is built from k's low bits (k = x log2(e) + 1.5 2^20,
//    whose ulp is 1/8: its bits hold 8 fl + j, so k << 20 holds fl << 23 above j's bits).
//    x is clamped to [-104, 20] for a only (fl in [-151, 28]; s in [2^-87, 2^92]): above
//    20 the result is 1 and below -104 it is 0 either way. NaN: the clamps pass it on.
//    Division rather than a reciprocal and a Newton step: the divider is a unit of its
//    own, and vrcpps' 12 bits leave about 1 ulp more after one step.
// Max error against float64 over tests/test_cpu_kernels.cpp's sweep: see the test.
namespace avx2 {
using V8 = __m256;

inline V8 vset8(float v) { return _mm256_set1_ps(v); }

[[gnu::always_inline]] inline V8 exp8(V8 x) {
  const V8 shift = vset8(12582912.0f);  // 1.5 2^23: adding and taking it away rounds
  const V8 t = _mm256_max_ps(vset8(-104.0f), _mm256_min_ps(vset8(89.0f), x));
  const V8 k = _mm256_fmadd_ps(t, vset8(1.44269504088896341f), shift);
  const V8 n = _mm256_sub_ps(k, shift);
  V8 r = _mm256_fnmadd_ps(n, vset8(0.693359375f), t);
  r = _mm256_fnmadd_ps(n, vset8(-2.12194440e-4f), r);
  V8 p = vset8(1.3926176120e-3f);
  p = _mm256_fmadd_ps(p, r, vset8(8.3631730745e-3f));
  p = _mm256_fmadd_ps(p, r, vset8(4.1666554662e-2f));
  p = _mm256_fmadd_ps(p, r, vset8(1.6666577026e-1f));
  p = _mm256_fmadd_ps(p, r, vset8(0.5f));
  p = _mm256_fmadd_ps(p, r, vset8(1.0f));
  p = _mm256_fmadd_ps(p, r, vset8(1.0f));
  // n's integer is k's bits less shift's; 2^n1 and 2^n2 from exponent bits.
  const __m256i ni = _mm256_sub_epi32(_mm256_castps_si256(k), _mm256_castps_si256(shift));
  const __m256i n1 = _mm256_srai_epi32(ni, 1);
  const __m256i n2 = _mm256_sub_epi32(ni, n1);
  const __m256i bias = _mm256_set1_epi32(127);
  const V8 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
  const V8 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
  return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}

// 2^64 2^(-j/8): kExp2NegSixteenths' even entries (2^(-j/8) rounded to float) times 2^64.
alignas(32) constexpr float kExp2NegEighths64[8] = {0x1p64f,
                                                    0x1p64f * 0.917004049f,
                                                    0x1p64f * 0.840896428f,
                                                    0x1p64f * 0.771105409f,
                                                    0x1p64f * 0.707106769f,
                                                    0x1p64f * 0.648419797f,
                                                    0x1p64f * 0.594603539f,
                                                    0x1p64f * 0.545253873f};

[[gnu::always_inline]] inline V8 sigmoid8(V8 x, V8 tab) {
  const V8 shift = vset8(1572864.0f);  // 1.5 2^20: its ulp is 1/8
  const V8 xc = _mm256_max_ps(vset8(-104.0f), _mm256_min_ps(vset8(20.0f), x));
  const V8 k = _mm256_fmadd_ps(xc, vset8(1.44269504088896341f), shift);
  const V8 t = _mm256_permutevar8x32_ps(tab, _mm256_castps_si256(k));  // 2^64 2^(-j/8)
  const V8 a = _mm256_sub_ps(k, shift);                                // fl + j/8
  V8 r = _mm256_fmsub_ps(a, vset8(0.693359375f), xc);                  // a ln2_hi exact
  r = _mm256_fmadd_ps(a, vset8(-2.12194440e-4f), r);                   // + a ln2_lo
  V8 q = _mm256_fmadd_ps(r, vset8(1.0f / 24), vset8(1.0f / 6));
  q = _mm256_fmadd_ps(q, r, vset8(0.5f));
  q = _mm256_fmadd_ps(q, r, vset8(1.0f));
  const V8 m = _mm256_fmadd_ps(_mm256_mul_ps(t, r), q, t);  // 2^64 2^(-j/8) e^r
  // s = 2^(fl + 64): k's bits << 20 are fl << 23 above j << 20 (shift's low 12 bits are 0)
  const __m256i sb =
      _mm256_add_epi32(_mm256_and_si256(_mm256_slli_epi32(_mm256_castps_si256(k), 20),
                                        _mm256_set1_epi32(int32_t(0xff800000u))),
                       _mm256_set1_epi32(191 << 23));
  const V8 s = _mm256_castsi256_ps(sb);
  return _mm256_div_ps(s, _mm256_add_ps(s, m));
}

// Runs f over 8 lanes at a time, four vectors an iteration, the tail under a mask
// (vmaskmovps does not fault on the lanes it leaves out).
template <typename F>
[[gnu::always_inline]] inline void unary_loop8(float* o, const float* x, int64_t n, F f) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const V8 a = f(_mm256_loadu_ps(x + i)), b = f(_mm256_loadu_ps(x + i + 8));
    const V8 c = f(_mm256_loadu_ps(x + i + 16)), d = f(_mm256_loadu_ps(x + i + 24));
    _mm256_storeu_ps(o + i, a);
    _mm256_storeu_ps(o + i + 8, b);
    _mm256_storeu_ps(o + i + 16, c);
    _mm256_storeu_ps(o + i + 24, d);
  }
  for (; i < n; i += 8) {
    const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(int32_t(std::min<int64_t>(n - i, 8))),
                                         _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    _mm256_maskstore_ps(o + i, m, f(_mm256_maskload_ps(x + i, m)));
  }
}

void exp_loop(float* o, const float* x, int64_t n) { unary_loop8(o, x, n, exp8); }
[[gnu::always_inline]] inline V8 exp_neg8(V8 x) { return exp8(_mm256_xor_ps(x, vset8(-0.0f))); }
void exp_neg_loop(float* o, const float* x, int64_t n) { unary_loop8(o, x, n, exp_neg8); }
void exp_mul_c_loop(float* o, const float* x, float c, int64_t n) {
  const V8 cv = vset8(c);
  unary_loop8(o, x, n, [cv](V8 v) { return exp8(_mm256_mul_ps(v, cv)); });
}
// The same exp as exp_neg_loop, then the add and the division, each rounded as its own loop
// would round it.
void div_c_plus_exp_neg_loop(float* o, const float* x, float c, int64_t n) {
  const V8 cv = vset8(c);
  unary_loop8(o, x, n, [cv](V8 v) { return _mm256_div_ps(v, _mm256_add_ps(cv, exp_neg8(v))); });
}
void sigmoid_loop(float* o, const float* x, int64_t n) {
  const V8 tab = _mm256_load_ps(kExp2NegEighths64);
  unary_loop8(o, x, n, [tab](V8 v) { return sigmoid8(v, tab); });
}
void sigmoid_mul_c_loop(float* o, const float* x, float c, int64_t n) {
  const V8 tab = _mm256_load_ps(kExp2NegEighths64), cv = vset8(c);
  unary_loop8(o, x, n, [tab, cv](V8 v) { return sigmoid8(_mm256_mul_ps(v, cv), tab); });
}

}  // namespace avx2
#pragma GCC pop_options

bool cpu_has_avx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
#else
bool cpu_has_avx2() { return false; }
#endif

const VecIsa g_widest = cpu_has_avx512() ? VecIsa::Avx512
                        : cpu_has_avx2() ? VecIsa::Avx2
                                         : VecIsa::Portable;
// MT_VEC_EXP=avx2 or portable (read once, when the library loads) caps the loops, for A/B
// runs of whole programs (an AVX2 machine's loops on one with AVX-512); otherwise no cap.
int cap_from_environment() {
  const char* v = std::getenv("MT_VEC_EXP");
  if (v && std::strcmp(v, "avx2") == 0) return int(VecIsa::Avx2);
  if (v && std::strcmp(v, "portable") == 0) return int(VecIsa::Portable);
  return int(VecIsa::Avx512);
}
std::atomic<int> g_cap{cap_from_environment()};

// The loops that run: the widest the CPU has, at most the cap.
inline VecIsa active() {
  return VecIsa(std::min(int(g_widest), g_cap.load(std::memory_order_relaxed)));
}

}  // namespace

VecIsa vec_exp_widest() { return g_widest; }
VecIsa vec_exp_isa() { return active(); }
VecIsa set_vec_exp_isa(VecIsa cap) { return VecIsa(g_cap.exchange(int(cap))); }

bool vec_exp_active() { return active() == VecIsa::Avx512; }

bool set_vec_exp_enabled(bool enabled) {
  return g_cap.exchange(int(enabled ? VecIsa::Avx512 : VecIsa::Portable)) != int(VecIsa::Portable);
}

// AVX-512, AVX2 (where the loop has an AVX2 form; else portable) or portable.
#if MT_HAVE_AVX512_EXP
#define MT_VEC_LOOP(avx512, avx2_loop, portable, ...) \
  switch (active()) {                                 \
    case VecIsa::Avx512:                              \
      return avx512(__VA_ARGS__);                     \
    case VecIsa::Avx2:                                \
      return avx2_loop(__VA_ARGS__);                  \
    case VecIsa::Portable:                            \
      break;                                          \
  }                                                   \
  return portable(__VA_ARGS__)
#else
#define MT_VEC_LOOP(avx512, avx2_loop, portable, ...) return portable(__VA_ARGS__)
#endif

void exp_f32_loop(float* o, const float* x, int64_t n) {
  MT_VEC_LOOP(exp_avx512, avx2::exp_loop, exp_portable, o, x, n);
}
void exp_neg_f32_loop(float* o, const float* x, int64_t n) {
  MT_VEC_LOOP(exp_neg_avx512, avx2::exp_neg_loop, exp_neg_portable, o, x, n);
}
void div_c_plus_exp_neg_f32_loop(float* o, const float* x, float c, int64_t n) {
  MT_VEC_LOOP(div_c_plus_exp_neg_avx512, avx2::div_c_plus_exp_neg_loop, div_c_plus_exp_neg_portable,
              o, x, c, n);
}
void sigmoid_f32_loop(float* o, const float* x, int64_t n) {
  MT_VEC_LOOP(sigmoid_avx512, avx2::sigmoid_loop, sigmoid_portable, o, x, n);
}
void sigmoid_mul_c_f32_loop(float* o, const float* x, float c, int64_t n) {
  MT_VEC_LOOP(sigmoid_mul_c_avx512, avx2::sigmoid_mul_c_loop, sigmoid_mul_c_portable, o, x, c, n);
}
void exp_mul_c_f32_loop(float* o, const float* x, float c, int64_t n) {
  MT_VEC_LOOP(exp_mul_c_avx512, avx2::exp_mul_c_loop, exp_mul_c_portable, o, x, c, n);
}
// No AVX2 forms (yet): the portable ISA clones' v3 loop runs there.
void silu_f32_loop(float* o, const float* x, int64_t n) {
  MT_VEC_LOOP(silu_avx512, silu_portable, silu_portable, o, x, n);
}
void gelu_f32_loop(float* o, const float* x, int64_t n) {
  MT_VEC_LOOP(gelu_avx512, gelu_portable, gelu_portable, o, x, n);
}
void silu_backward_f32_loop(float* o, const float* g, const float* x, int64_t n) {
  MT_VEC_LOOP(silu_backward_avx512, silu_backward_portable, silu_backward_portable, o, g, x, n);
}

}  // namespace mt::cpu
