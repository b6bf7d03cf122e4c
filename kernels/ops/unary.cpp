// The elementwise unary ops: mt::neg, exp, log, sqrt, pow (scalar exponent), abs, sign,
// sigmoid, tanh, relu. Float-valued ops give float32 for int64/bool inputs (as PyTorch);
// neg, abs, sign and relu keep the dtype. Backwards are dispatched ops, so they
// differentiate again.
#include <cmath>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/gpu/gpu_kernels.h"
#include "kernels/ops/registry.h"

namespace mt {
namespace ops {
namespace {

using cpu::UnaryOp;

// The output of a unary op: x's shape; keeps_dtype ops keep int64, others go float.
Tensor unary_result(const Tensor& x, bool keeps_dtype) {
  DType t = keeps_dtype ? x.dtype() : float_result(x.dtype());
  return empty(x.sizes(), {.dtype = t, .device = x.device()});
}

// Registers `name` computing cpu::unary(kind) with backward(g, x) -> the gradient of x.
// Note [Saved inputs, not outputs]: backward(g, x) gets the saved input, and exp, sigmoid
// and tanh recompute f(x) from it (one more op in backward), so every formula is written
// in x alone. Saving the output would work too: the autograd kernel sets an output's
// history before setup_context runs, and a saved output gets its grad_fn back when
// unpacked, so double backward flows through it (tests/test_autograd.cpp, "saved outputs
// keep their gradient path"). Saving x is a choice of style here, not a necessity.
template <typename Backward>
void register_unary_op(const char* name, UnaryOp kind, bool keeps_dtype, Backward backward) {
  auto op = custom_op(
      name,
      [kind, keeps_dtype](const Tensor& x) {
        Tensor out = unary_result(x, keeps_dtype);
        cpu::unary(kind, x, out);
        return out;
      },
      {.mutates_args = {}, .schema = "(Tensor self) -> Tensor"});
  op.register_kernel(DeviceType::CUDA, [kind, keeps_dtype](const Tensor& x) {
    Tensor out = unary_result(x, keeps_dtype);
    gpu::unary(kind, x, out);
    return out;
  });
  op.register_fake([keeps_dtype](const Tensor& x) { return unary_result(x, keeps_dtype); });
  op.register_autograd(
      [backward](AutogradContext& ctx, const Tensor& g) { return backward(g, ctx.saved()[0]); },
      [](AutogradContext& ctx, const Tensor& x, const Tensor&) { ctx.save_for_backward({x}); });
  keep(op);
}

// pow keeps an integer dtype for a non-negative integral exponent (int64 ** 2 is int64),
// else computes in float, like PyTorch.
Tensor pow_result(const Tensor& x, double e) {
  bool integral = !is_floating(x.dtype()) && e >= 0 && e == std::trunc(e);
  DType t = integral ? DType::Int64 : float_result(x.dtype());
  return empty(x.sizes(), {.dtype = t, .device = x.device()});
}

// sign(x) in x's dtype: -1, 0 or 1 (NaN stays NaN), as x / |x| with 0 -> 0.
Tensor sign_cpu(const Tensor& x) {
  Tensor out = empty_like(x);
  Tensor work = is_floating(x.dtype()) ? out : empty(x.sizes(), {.dtype = DType::Float64});
  cpu::unary(UnaryOp::Abs, x, work);
  cpu::binary(cpu::BinaryOp::Div, x, work, work);
  cpu::where(x, work, scalar_tensor(0, {.dtype = work.dtype()}), work);
  if (!work.is_same(out)) detail::copy_impl(out, work);
  return out;
}

template <auto Compute>  // cpu::pow_scalar or gpu::pow_scalar
Tensor pow_kernel(const Tensor& x, double e) {
  Tensor out = pow_result(x, e);
  Compute(x, e, out);
  return out;
}

void register_pow() {
  auto op = custom_op("mt::pow", pow_kernel<cpu::pow_scalar>,
                      {.mutates_args = {}, .schema = "(Tensor self, float exponent) -> Tensor"});
  op.register_kernel(DeviceType::CUDA, pow_kernel<gpu::pow_scalar>);
  op.register_fake([](const Tensor& x, double e) { return pow_result(x, e); });
  // d/dx x^p = p x^(p-1); the p == 0 case is exactly 0 (not 0 * x^-1, NaN at x = 0).
  op.register_autograd(
      [](AutogradContext& ctx, const Tensor& g) {
        double p = std::any_cast<double>(ctx.data["exponent"]);
        if (p == 0) return mul(g, 0.0);
        if (p == 1) return g;
        return mul(g, mul(pow(ctx.saved()[0], p - 1), p));
      },
      [](AutogradContext& ctx, const Tensor& x, double e, const Tensor&) {
        ctx.save_for_backward({x});
        ctx.data["exponent"] = e;
      });
  keep(op);
}

// sign has a zero gradient everywhere it is defined.
void register_sign() {
  auto op = custom_op("mt::sign", sign_cpu,
                      {.mutates_args = {}, .schema = "(Tensor self) -> Tensor"});
  op.register_kernel(DeviceType::CUDA, [](const Tensor& x) {
    Tensor out = empty_like(x);
    gpu::sign(x, out);
    return out;
  });
  op.register_fake([](const Tensor& x) { return empty_like(x); });
  op.register_autograd([](AutogradContext&, const Tensor& g) { return mul(g, 0.0); },
                       [](AutogradContext&, const Tensor&, const Tensor&) {});
  keep(op);
}

}  // namespace

void register_unary() {
  register_unary_op("mt::neg", UnaryOp::Neg, true,
                    [](const Tensor& g, const Tensor&) { return neg(g); });
  register_unary_op("mt::exp", UnaryOp::Exp, false,
                    [](const Tensor& g, const Tensor& x) { return mul(g, exp(x)); });
  register_unary_op("mt::log", UnaryOp::Log, false,
                    [](const Tensor& g, const Tensor& x) { return div(g, x); });
  register_unary_op("mt::sqrt", UnaryOp::Sqrt, false,
                    [](const Tensor& g, const Tensor& x) { return div(g, mul(sqrt(x), 2.0)); });
  register_unary_op("mt::abs", UnaryOp::Abs, true,
                    [](const Tensor& g, const Tensor& x) { return mul(g, sign(x)); });
  // s' = s (1 - s) = s - s^2
  register_unary_op("mt::sigmoid", UnaryOp::Sigmoid, false, [](const Tensor& g, const Tensor& x) {
    Tensor s = sigmoid(x);
    return mul(g, sub(s, mul(s, s)));
  });
  // t' = 1 - t^2
  register_unary_op("mt::tanh", UnaryOp::Tanh, false, [](const Tensor& g, const Tensor& x) {
    Tensor t = tanh(x);
    return sub(g, mul(g, mul(t, t)));
  });
  // The mask x > 0 is relu(sign(x)): made by ops, so its own derivative (0) is defined.
  register_unary_op("mt::relu", UnaryOp::Relu, true,
                    [](const Tensor& g, const Tensor& x) { return mul(g, relu(sign(x))); });
  register_pow();
  register_sign();
}

}  // namespace ops

using UnaryFn = Tensor(const Tensor&);

Tensor neg(const Tensor& x) { MT_BUILTIN_OP("mt::neg", UnaryFn); return op(x); }
Tensor exp(const Tensor& x) { MT_BUILTIN_OP("mt::exp", UnaryFn); return op(x); }
Tensor log(const Tensor& x) { MT_BUILTIN_OP("mt::log", UnaryFn); return op(x); }
Tensor sqrt(const Tensor& x) { MT_BUILTIN_OP("mt::sqrt", UnaryFn); return op(x); }
Tensor abs(const Tensor& x) { MT_BUILTIN_OP("mt::abs", UnaryFn); return op(x); }
Tensor sign(const Tensor& x) { MT_BUILTIN_OP("mt::sign", UnaryFn); return op(x); }
Tensor sigmoid(const Tensor& x) { MT_BUILTIN_OP("mt::sigmoid", UnaryFn); return op(x); }
Tensor tanh(const Tensor& x) { MT_BUILTIN_OP("mt::tanh", UnaryFn); return op(x); }
Tensor relu(const Tensor& x) { MT_BUILTIN_OP("mt::relu", UnaryFn); return op(x); }
Tensor pow(const Tensor& x, double exponent) {
  MT_BUILTIN_OP("mt::pow", Tensor(const Tensor&, double));
  return op(x, exponent);
}

}  // namespace mt
