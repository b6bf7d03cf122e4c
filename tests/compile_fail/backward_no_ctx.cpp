// SPDX-License-Identifier: MIT
// Mistake: backward(grad) without the context parameter (the tutorial's Python demo
// passes a function of this shape; there it fails only when backward runs).
#include "tests/compile_fail/op.h"

using namespace mt;

void register_it() {
  make_mul2().register_autograd(
      [](const Tensor& g) {
        return std::tuple<Tensor, Tensor>{g, g};
      },
      [](AutogradContext& ctx, const Tensor& a, const Tensor& b, const Tensor&) {
        ctx.save_for_backward({a, b});
      });
}
