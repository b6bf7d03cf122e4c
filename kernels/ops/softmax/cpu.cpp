// SPDX-License-Identifier: MIT
// softmax and log_softmax along one dim, numerically stable: the row's max is
// subtracted before exp, so large inputs (1000) neither overflow nor lose the row.
#include <cmath>
#include <vector>

#include "kernels/cpu/loops.h"
#include "kernels/cpu/math.h"
#include "kernels/ops/softmax/softmax.h"

namespace mt::cpu {
namespace {

// One row of n contiguous values of C, in place: y = softmax(y) or log_softmax(y).
template <typename C>
void softmax_row(C* y, int64_t n, bool log) {
  C m = y[0];
  for (int64_t i = 1; i < n; ++i) m = y[i] > m ? y[i] : m;
  // A row of -inf (or +inf) has no finite max: y - m is NaN, as in PyTorch.
  C s = 0;
  if (log) {
    MT_SIMD_SUM(s) for (int64_t i = 0; i < n; ++i) s += exp_f32(C(y[i] - m));
    const C shift = m + C(std::log(s));
    MT_SIMD for (int64_t i = 0; i < n; ++i) y[i] = y[i] - shift;
  } else {
    MT_SIMD_SUM(s) for (int64_t i = 0; i < n; ++i) {
      y[i] = exp_f32(C(y[i] - m));
      s += y[i];
    }
    const C inv = C(1) / s;
    MT_SIMD for (int64_t i = 0; i < n; ++i) y[i] *= inv;
  }
}

void softmax_impl(const char* op, const Tensor& x, int64_t dim, const Tensor& out, bool log) {
  (void)make_loop(op, out, {x});  // device, fake and overlap checks
  MT_CHECK(x.sizes() == out.sizes(), "[{}] the output has shape {}, expected the input's {}", op,
           out.sizes(), x.sizes());
  MT_CHECK(is_floating(out.dtype()),
           "[{}] needs a floating output, got {}; pass a float32 out for integer inputs", op,
           out.dtype());
  const int64_t nd = x.dim();
  dim = wrap_dim(dim, nd, op);
  if (x.numel() == 0) return;
  const int64_t n = nd ? x.size(dim) : 1;
  const int64_t xs = nd ? x.stride(dim) * int64_t(x.element_size()) : 0;
  const int64_t os = nd ? out.stride(dim) * int64_t(out.element_size()) : 0;
  const int64_t rows = x.numel() / n;
  // The other dims, in order, to find where each row starts.
  int64_t sizes[kMaxDims], xst[kMaxDims], ost[kMaxDims];
  int nk = 0;
  for (int64_t d = 0; d < nd; ++d)
    if (d != dim) {
      sizes[nk] = x.size(d);
      xst[nk] = x.stride(d) * int64_t(x.element_size());
      ost[nk++] = out.stride(d) * int64_t(out.element_size());
    }
  const char* xp = static_cast<const char*>(x.data_ptr());
  char* op_ = static_cast<char*>(out.data_ptr());
  visit_compute(out.dtype(), [&](auto tag) {
    using C = decltype(tag);
    if constexpr (std::is_floating_point_v<C>) {
      constexpr DType kC = dtype_v<C>;
      const bool direct = x.dtype() == kC && out.dtype() == kC && xs == int64_t(sizeof(C)) &&
                          os == int64_t(sizeof(C));
      parallel_for(rows, std::max<int64_t>(1, kGrainSize / (4 * n)), [&](int64_t b, int64_t e) {
        std::vector<C> buf(direct ? 0 : size_t(n));
        for (int64_t r = b; r < e; ++r) {
          int64_t xo = 0, oo = 0, rem = r;
          for (int d = nk - 1; d >= 0; --d) {
            int64_t i = rem % sizes[d];
            rem /= sizes[d];
            xo += i * xst[d], oo += i * ost[d];
          }
          if (direct) {  // contiguous rows of the compute type: out holds the work
            C* y = reinterpret_cast<C*>(op_ + oo);
            const C* src = reinterpret_cast<const C*>(xp + xo);
            if (y != src) std::copy(src, src + n, y);
            softmax_row(y, n, log);
          } else {
            load_row<C>(x.dtype(), xp + xo, xs, n, buf.data());
            softmax_row(buf.data(), n, log);
            store_row<C>(out.dtype(), op_ + oo, os, n, buf.data());
          }
        }
      });
    }
  });
}

}  // namespace

void softmax(const Tensor& x, int64_t dim, const Tensor& out) {
  softmax_impl("softmax", x, dim, out, false);
}

void log_softmax(const Tensor& x, int64_t dim, const Tensor& out) {
  softmax_impl("log_softmax", x, dim, out, true);
}

}  // namespace mt::cpu
