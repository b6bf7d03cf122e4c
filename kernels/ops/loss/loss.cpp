// SPDX-License-Identifier: MIT
// mt::mse_loss(input, target): mean((input - target)^2) as a 0-d tensor, with a
// gradient for both operands. The shapes must match (broadcasting a loss is usually a
// bug, which PyTorch only warns about). On the CPU its kernels are the shared squared
// difference and mean (kernels/cpu); on CUDA one jit::reduction computes both in one launch.
#include "kernels/ops/loss/loss.h"

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/jit/reduction.h"
#include "kernels/ops/registry.h"

namespace mt {
namespace ops {
namespace {

Tensor mse_result(const Tensor& input, const Tensor& target) {
  MT_CHECK(input.sizes() == target.sizes(),
           "[mse_loss] input has shape {} but target has shape {}; they must match (reshape "
           "the target, e.g. target.view(input.sizes()))",
           input.sizes(), target.sizes());
  MT_CHECK(input.device() == target.device(),
           "[mse_loss] the inputs are on different devices ({} and {}); move one with .to()",
           input.device(), target.device());
  DType t = float_result(promote_types(input.dtype(), target.dtype()));
  return empty({}, {.dtype = t, .device = input.device()});
}

// The CPU kernel: SquaredDiff is cpu::squared_diff, Mean cpu::mean.
template <auto SquaredDiff, auto Mean>
Tensor mse_kernel(const Tensor& input, const Tensor& target) {
  Tensor out = mse_result(input, target);
  Tensor squared = empty(input.sizes(), {.dtype = out.dtype(), .device = input.device()});
  SquaredDiff(input, target, squared);
  Mean(squared, {}, false, out);  // NaN for empty inputs, as in PyTorch
  return out;
}

// CUDA: the squared difference and its mean in one launch (one CUDA graph node in a
// compiled step, where the two kernels were two), accumulated in float (double for float64).
Tensor mse_cuda(const Tensor& input, const Tensor& target) {
  const Tensor out = mse_result(input, target);
  static const jit::Reduction mse =
      jit::reduction({.name = "mse_loss", .map = "(x - y) * (x - y)", .post = "acc / n"});
  const Tensor in[] = {input, target};
  Tensor r = mse.call(in);  // NaN for empty inputs (0 / 0), as in PyTorch
  return r.dtype() == out.dtype() ? r : r.to(out.dtype());
}

}  // namespace

void register_loss() {
  auto op = custom_op("mt::mse_loss", mse_kernel<cpu::squared_diff, cpu::mean>,
                      {.mutates_args = {}, .schema = "(Tensor self, Tensor target) -> Tensor"});
  op.register_kernel(DeviceType::CUDA, mse_cuda);
  op.register_fake(mse_result);
  // d/dinput = 2 (input - target) / n * g = -d/dtarget.
  op.register_autograd(
      [](AutogradContext& ctx, const Tensor& g) {
        auto saved = ctx.saved();
        const Tensor &x = saved[0], &t = saved[1];
        Tensor d = mul(sub(x, t), mul(g, 2.0 / double(x.numel())));
        Tensor gx, gt;
        if (ctx.needs_input_grad(0)) gx = d.dtype() == x.dtype() ? d : d.to(x.dtype());
        if (ctx.needs_input_grad(1)) gt = neg(d.dtype() == t.dtype() ? d : d.to(t.dtype()));
        return std::tuple<Tensor, Tensor>(gx, gt);
      },
      [](AutogradContext& ctx, const Tensor& x, const Tensor& t, const Tensor&) {
        ctx.save_for_backward({x, t});
      });
  keep(op);
}

std::vector<jit::EmbeddedKernelFile> loss_kernel_files() { return {}; }  // no .cu of its own

}  // namespace ops

Tensor mse_loss(const Tensor& input, const Tensor& target) {
  MT_BUILTIN_OP("mt::mse_loss", Tensor(const Tensor&, const Tensor&));
  return op(input, target);
}

}  // namespace mt
