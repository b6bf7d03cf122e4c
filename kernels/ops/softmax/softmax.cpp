// SPDX-License-Identifier: MIT
// mt::softmax and mt::log_softmax along one dim, numerically stable (the kernel
// subtracts the row's max). Integer inputs give float32. Backwards, with y the output
// (recomputed from the saved input, as in Note [Saved inputs, not outputs] in
// kernels/ops/unary.cpp):
// softmax: y * (g - sum(g * y)), log_softmax: g - exp(y) * sum(g), sums along dim.
#include "kernels/ops/softmax/softmax.h"

#include "kernels/ops/registry.h"

namespace mt {
namespace ops {
namespace {

template <bool Log>
Tensor softmax_result(const Tensor& x, int64_t dim) {
  (void)wrap_dim(dim, x.dim(), Log ? "log_softmax" : "softmax");  // checks the dim
  return empty(x.sizes(), {.dtype = float_result(x.dtype()), .device = x.device()});
}

// Compute: cpu::softmax, cpu::log_softmax, or their gpu:: twins.
template <bool Log, auto Compute>
Tensor softmax_kernel(const Tensor& x, int64_t dim) {
  Tensor out = softmax_result<Log>(x, dim);
  Compute(x, dim, out);
  return out;
}

template <bool Log>
void register_softmax_op(const char* name,
                         std::source_location loc = std::source_location::current()) {
  auto op = custom_op(name, softmax_kernel < Log, Log ? cpu::log_softmax : cpu::softmax >,
                      {.mutates_args = {}, .schema = "(Tensor self, int dim) -> Tensor"}, loc);
  op.register_kernel(DeviceType::CUDA, softmax_kernel < Log,
                     Log ? gpu::log_softmax : gpu::softmax >, loc);
  op.register_fake(softmax_result<Log>, loc);
  op.register_autograd(
      [](AutogradContext& ctx, const Tensor& g) {
        Tensor x = ctx.saved()[0];
        int64_t d = std::any_cast<int64_t>(ctx.data["dim"]);
        std::vector<int64_t> dim{d};
        if (Log) return sub(g, mul(softmax(x, d), sum(g, dim, true)));  // exp(y) = softmax(x)
        Tensor y = softmax(x, d);
        return mul(y, sub(g, sum(mul(g, y), dim, true)));
      },
      [](AutogradContext& ctx, const Tensor& x, int64_t dim, const Tensor&) {
        ctx.save_for_backward(x);
        ctx.data["dim"] = dim;
      },
      loc);
  keep(op);
}

}  // namespace

void register_softmax() {
  register_softmax_op<false>("mt::softmax");
  register_softmax_op<true>("mt::log_softmax");
}

}  // namespace ops

Tensor softmax(const Tensor& x, int64_t dim) {
  MT_BUILTIN_OP("mt::softmax", Tensor(const Tensor&, int64_t));
  return op(x, dim);
}
Tensor log_softmax(const Tensor& x, int64_t dim) {
  MT_BUILTIN_OP("mt::log_softmax", Tensor(const Tensor&, int64_t));
  return op(x, dim);
}

}  // namespace mt
