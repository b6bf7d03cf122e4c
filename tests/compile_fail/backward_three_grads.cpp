// SPDX-License-Identifier: MIT
// Mistake: backward returns 3 gradients for an op with 2 Tensor inputs.
#include "tests/compile_fail/op.h"

using namespace mt;

void register_it() {
  make_mul2().register_autograd(
      [](AutogradContext& ctx, const Tensor& g) {
        auto s = ctx.saved();
        return std::tuple<Tensor, Tensor, Tensor>{s[1], s[0], g};
      },
      [](AutogradContext& ctx, const Tensor& a, const Tensor& b, const Tensor&) {
        ctx.save_for_backward({a, b});
      });
}
