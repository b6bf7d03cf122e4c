// SPDX-License-Identifier: MIT
// Mistake: setup_context takes the inputs but not the output (the tutorial's
// setup_context(ctx, inputs) without output, in C++ form).
#include "tests/compile_fail/op.h"

using namespace mt;

void register_it() {
  make_mul2().register_autograd(
      [](AutogradContext& ctx, const Tensor& g) {
        auto s = ctx.saved();
        return std::tuple<Tensor, Tensor>{s[1], s[0]};
      },
      [](AutogradContext& ctx, const Tensor& a, const Tensor& b) {
        ctx.save_for_backward({a, b});
      });
}
