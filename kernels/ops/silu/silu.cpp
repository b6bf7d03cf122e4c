// SPDX-License-Identifier: MIT
// mt::silu: y = x * sigmoid(x), and mt::silu_backward, its fused gradient
// grad * s * (1 + x * (1 - s)) in one pass over x and grad. Every key registers here,
// through one custom_op handle per op: CPU (the forward through its row's loop in
// kernels/cpu, the backward in cpu.cpp), CUDA (cuda.cpp, whose device code is silu.cu),
// Fake and Autograd.
#include "kernels/ops/silu/silu.h"

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/jit/expr.h"
#include "kernels/ops/pointwise_eval.h"
#include "kernels/ops/registry.h"

namespace mt {
namespace ops {

void register_silu() {
  auto silu_op = custom_op("mt::silu",
                           [](const Tensor& x) {
                             check_floating(x, "silu");
                             Tensor out = empty_like(x);
                             cpu::unary(cpu::UnaryOp::Silu, x, out);
                             return out;
                           },
                           {.schema = "(Tensor self) -> Tensor"});
  silu_op.register_kernel(DeviceType::CUDA, [](const Tensor& x) {
    check_floating(x, "silu");
    Tensor out = empty_like(x);
    gpu::silu(x, out);
    return out;
  });
  silu_op.register_fake([](const Tensor& x) {
    check_floating(x, "silu");
    return empty_like(x);
  });
  silu_op.register_autograd(
      [](AutogradContext& ctx, const Tensor& grad) { return silu_backward(grad, ctx.saved()[0]); },
      [](AutogradContext& ctx, const Tensor& x, const Tensor&) { ctx.save_for_backward(x); });
  keep(silu_op);

  auto bwd_op =
      custom_op("mt::silu_backward",
                [](const Tensor& grad, const Tensor& x) {
                  MT_CHECK(grad.sizes() == x.sizes(),
                           "[silu_backward] grad has shape {} but x has shape {}; they must match",
                           grad.sizes(), x.sizes());
                  check_floating(x, "silu_backward");
                  Tensor out = empty_like(x);
                  cpu::silu_backward(grad, x, out);
                  return out;
                },
                {.schema = "(Tensor grad_output, Tensor self) -> Tensor"});
  bwd_op.register_kernel(DeviceType::CUDA, [](const Tensor& grad, const Tensor& x) {
    MT_CHECK(grad.sizes() == x.sizes(),
             "[silu_backward] grad has shape {} but x has shape {}; they must match", grad.sizes(),
             x.sizes());
    check_floating(x, "silu_backward");
    Tensor out = empty_like(x);
    gpu::silu_backward(grad, x, out);
    return out;
  });
  bwd_op.register_fake([](const Tensor& grad, const Tensor& x) {
    MT_CHECK(grad.sizes() == x.sizes(),
             "[silu_backward] grad has shape {} but x has shape {}; they must match", grad.sizes(),
             x.sizes());
    return empty_like(x);
  });
  // d/dgrad = silu'(x); d/dx = grad * silu''(x), silu'' = s(1-s)(2 + x(1-2s)).
  bwd_op.register_autograd(
      [](AutogradContext& ctx, const Tensor& gg) {
        auto saved = ctx.saved();
        const Tensor &grad = saved[0], &x = saved[1];
        Tensor d_grad, d_x;
        if (ctx.needs_input_grad(0)) d_grad = silu_backward(gg, x);
        if (ctx.needs_input_grad(1)) {
          Tensor s = sigmoid(x);
          Tensor one_minus = sub(ones_like(s), s);
          Tensor second = mul(mul(s, one_minus), add(mul(x, sub(ones_like(s), mul(s, 2.0))), 2.0));
          d_x = mul(mul(gg, grad), second);
        }
        return std::tuple<Tensor, Tensor>(d_grad, d_x);
      },
      [](AutogradContext& ctx, const Tensor& grad, const Tensor& x, const Tensor&) {
        ctx.save_for_backward({grad, x});
      });
  keep(bwd_op);

  // mt::compile fuses mt::silu_backward with the elementwise ops around it (Note [Pointwise
  // fusion] in kernels/compile/fuse.cpp) through this formula; mt::silu has its row's.
  auto formula = std::make_shared<PointwiseFormula>();
  formula->tensors = 2;
  formula->program =
      jit::expr::parse("mt::silu_backward", "t = sigmoid(x); g * t * (1 + x * (1 - t))", {"g", "x"},
                       {}, {"out"}, false);
  set_pointwise_formula("mt::silu_backward", std::move(formula));
}

}  // namespace ops

// mt::silu itself, the public function, comes from its row of the elementwise table, as
// every unary row's does (kernels/ops/unary.cpp).

Tensor silu_backward(const Tensor& grad, const Tensor& x) {
  MT_BUILTIN_OP("mt::silu_backward", Tensor(const Tensor&, const Tensor&));
  return op(grad, x);
}

}  // namespace mt
