// SPDX-License-Identifier: MIT
// Mistake: setup_context takes only ctx and the first input (the op has 2 inputs and an output).
#include "tests/compile_fail/op.h"

using namespace mt;

void register_it() {
  make_mul2().register_autograd(
      [](AutogradContext& ctx, const Tensor& g) {
        auto s = ctx.saved();
        return std::tuple<Tensor, Tensor>{s[1], s[0]};
      },
      [](AutogradContext& ctx, const Tensor& a) { ctx.save_for_backward({a}); });
}
