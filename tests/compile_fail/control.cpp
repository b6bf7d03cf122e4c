// SPDX-License-Identifier: MIT
// Control: a correct register_autograd for a 2-input op must compile, so the harness's
// compiler command (include dirs, flags) is proven to work.
#include "tests/compile_fail/op.h"

using namespace mt;

void register_it() {
  make_mul2().register_autograd(
      [](AutogradContext& ctx, const Tensor& g) {
        auto s = ctx.saved();
        return std::tuple<Tensor, Tensor>{s[1], s[0]};
      },
      [](AutogradContext& ctx, const Tensor& a, const Tensor& b, const Tensor&) {
        ctx.save_for_backward({a, b});
      });
}
