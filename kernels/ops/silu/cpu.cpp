// SPDX-License-Identifier: MIT
// SiLU's fused backward on the CPU: one pass over grad and x with the loops of
// kernels/cpu/loops.h; float32 (and the 16-bit types, which compute in float) through the
// AVX-512 loop of kernels/cpu/vec_exp.h, float64 through the plain one here.
#include <cmath>
#include <type_traits>

#include "kernels/cpu/loops.h"
#include "kernels/cpu/vec_exp.h"
#include "kernels/ops/silu/silu.h"
#include "runtime/error.h"

namespace mt::cpu {
namespace {

// The float64 SiLU backward (float32 has silu_backward_f32_loop).
inline void silu_backward_loop(double* o, const double* g, const double* x, int64_t n) {
  MT_SIMD for (int64_t i = 0; i < n; ++i) {
    double s = 1.0 / (1.0 + std::exp(-x[i]));
    o[i] = g[i] * s * (1.0 + x[i] * (1.0 - s));
  }
}

}  // namespace

void silu_backward(const Tensor& grad, const Tensor& x, const Tensor& out) {
  MT_CHECK(is_floating(out.dtype()),
           "[silu_backward] needs a floating output, got {}; integer and bool inputs promote to "
           "float32 (pass a float32 out)",
           out.dtype());
  Loop it = make_loop("silu_backward", out, {grad, x});
  visit_compute(out.dtype(), [&](auto tag) {
    using C = decltype(tag);
    if constexpr (std::is_same_v<C, float>) {
      for_each_block<C>(it, [&](C* o, const C* const* in, int64_t n) {
        silu_backward_f32_loop(o, in[0], in[1], n);
      });
    } else if constexpr (std::is_floating_point_v<C>) {
      for_each_block<C>(
          it, [&](C* o, const C* const* in, int64_t n) { silu_backward_loop(o, in[0], in[1], n); });
    }
  });
}

}  // namespace mt::cpu
