// SPDX-License-Identifier: MIT
// The elementwise unary ops: each Unary row of kernels/elementwise_table.h (mt::neg, exp,
// ..., gelu) registered here with its backward, and given its public function; and mt::pow
// (scalar exponent). mt::silu, a row with kernels of its own, registers in silu.cpp. Float-
// valued ops give float32 for int64/bool inputs (as PyTorch); the kKeepDtype rows keep the
// dtype. Backwards are dispatched ops, so they differentiate again.
#include <cmath>
#include <source_location>
#include <string>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/elementwise_rows.h"
#include "kernels/gpu/gpu_kernels.h"
#include "kernels/ops/registry.h"

namespace mt {
namespace ops {
namespace {

using ew::Fn;

// The output of a unary op: x's shape; keeps_dtype ops keep int64, others go float.
Tensor unary_result(const Tensor& x, bool keeps_dtype) {
  DType t = keeps_dtype ? x.dtype() : float_result(x.dtype());
  return empty(x.sizes(), {.dtype = t, .device = x.device()});
}

// Which rows register_unary_op has registered: each unary row once (but kOwnKernels ones).
bool g_registered[ew::kNumFns] = {};

// Registers row fn of the elementwise table as mt::<name>: CPU and CUDA kernels computing
// its functors, a fake kernel with the result's shape and dtype, and backward(g, x) -> the
// gradient of x. loc (the caller's line) is what `minitensor dump` shows.
// Note [Saved inputs, not outputs]: backward(g, x) gets the saved input, and exp, sigmoid
// and tanh recompute f(x) from it (one more op in backward), so every formula is written
// in x alone. Saving the output would work too: the autograd kernel sets an output's
// history before setup_context runs, and a saved output gets its grad_fn back when
// unpacked, so double backward flows through it (tests/test_autograd.cpp, "saved outputs
// keep their gradient path"). Saving x is a choice of style here, not a necessity.
template <typename Backward>
void register_unary_op(Fn fn, Backward backward,
                       std::source_location loc = std::source_location::current()) {
  const ew::Row& row = ew::row(fn);
  MT_ASSERT(row.arity == ew::Arity::Unary && !row.own_kernels() && !g_registered[int(fn)],
            "[{}] is not a unary row of the elementwise table, or is registered twice", row.name);
  g_registered[int(fn)] = true;
  const bool keeps = row.keeps_dtype();
  auto op = custom_op(
      fmt::format("mt::{}", row.name),
      [fn, keeps](const Tensor& x) {
        Tensor out = unary_result(x, keeps);
        cpu::unary(fn, x, out);
        return out;
      },
      {.mutates_args = {}, .schema = "(Tensor self) -> Tensor"}, loc);
  op.register_kernel(
      DeviceType::CUDA,
      [fn, keeps](const Tensor& x) {
        Tensor out = unary_result(x, keeps);
        gpu::unary(fn, x, out);
        return out;
      },
      loc);
  op.register_fake([keeps](const Tensor& x) { return unary_result(x, keeps); }, loc);
  op.register_autograd(
      [backward](AutogradContext& ctx, const Tensor& g) { return backward(g, ctx.saved()[0]); },
      [](AutogradContext& ctx, const Tensor& x, const Tensor&) { ctx.save_for_backward(x); },
      loc);
  keep(op);
}

// Every unary row of the table needs a register_unary_op line in register_unary().
void check_every_unary_row_registered() {
  for (const ew::Row& r : ew::kRows)
    MT_ASSERT(r.arity != ew::Arity::Unary || r.own_kernels() || g_registered[int(r.fn)],
              "the elementwise row '{}' has no register_unary_op line in kernels/ops/unary.cpp",
              r.name);
}

// pow keeps an integer dtype for a non-negative integral exponent (int64 ** 2 is int64),
// else computes in float, like PyTorch.
Tensor pow_result(const Tensor& x, double e) {
  bool integral = !is_floating(x.dtype()) && e >= 0 && e == std::trunc(e);
  DType t = integral ? DType::Int64 : float_result(x.dtype());
  return empty(x.sizes(), {.dtype = t, .device = x.device()});
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
        ctx.save_for_backward(x);
        ctx.data["exponent"] = e;
      });
  keep(op);
}

}  // namespace

void register_unary() {
  register_unary_op(Fn::Neg, [](const Tensor& g, const Tensor&) { return neg(g); });
  register_unary_op(Fn::Exp, [](const Tensor& g, const Tensor& x) { return mul(g, exp(x)); });
  register_unary_op(Fn::Log, [](const Tensor& g, const Tensor& x) { return div(g, x); });
  register_unary_op(Fn::Sqrt,
                    [](const Tensor& g, const Tensor& x) { return div(g, mul(sqrt(x), 2.0)); });
  register_unary_op(Fn::Abs, [](const Tensor& g, const Tensor& x) { return mul(g, sign(x)); });
  // sign has a zero gradient everywhere it is defined.
  register_unary_op(Fn::Sign, [](const Tensor& g, const Tensor&) { return mul(g, 0.0); });
  // s' = s (1 - s) = s - s^2
  register_unary_op(Fn::Sigmoid, [](const Tensor& g, const Tensor& x) {
    Tensor s = sigmoid(x);
    return mul(g, sub(s, mul(s, s)));
  });
  // t' = 1 - t^2
  register_unary_op(Fn::Tanh, [](const Tensor& g, const Tensor& x) {
    Tensor t = tanh(x);
    return sub(g, mul(g, mul(t, t)));
  });
  // The mask x > 0 is relu(sign(x)): made by ops, so its own derivative (0) is defined.
  register_unary_op(Fn::Relu,
                    [](const Tensor& g, const Tensor& x) { return mul(g, relu(sign(x))); });
  // gelu = x/2 (1 + t), t = tanh(u), u = k (x + c x^3): gelu' = (1 + t)/2 + x/2 (1 - t^2) u'.
  register_unary_op(Fn::Gelu, [](const Tensor& g, const Tensor& x) {
    const double k = 0.7978845608028654, c = 0.044715;  // sqrt(2/pi)
    Tensor x2 = mul(x, x);
    Tensor t = tanh(mul(mul(x, add(mul(x2, c), 1.0)), k));
    Tensor du = mul(add(mul(x2, 3 * c), 1.0), k);
    Tensor one_minus_t2 = add(mul(mul(t, t), -1.0), 1.0);
    return mul(g, add(mul(add(t, 1.0), 0.5), mul(mul(x, 0.5), mul(one_minus_t2, du))));
  });
  register_pow();
  check_every_unary_row_registered();
}

}  // namespace ops

// The public functions of the table's Unary rows (declared in kernels/ops.h from the same
// rows), mt::silu's included: each calls its op through a typed handle found once.
using UnaryFn = Tensor(const Tensor&);
#define MT_EW_DEFINE_Unary(name)          \
  Tensor name(const Tensor& x) {          \
    MT_BUILTIN_OP("mt::" #name, UnaryFn); \
    return op(x);                         \
  }
#define MT_EW_DEFINE_Scalar(name)
#define MT_EW_DEFINE_Binary(name)
#define MT_EW_DEFINE(Id, name, arity, ...) MT_EW_DEFINE_##arity(name)
MT_ELEMENTWISE_OPS(MT_EW_DEFINE)
#undef MT_EW_DEFINE
#undef MT_EW_DEFINE_Binary
#undef MT_EW_DEFINE_Scalar
#undef MT_EW_DEFINE_Unary

Tensor pow(const Tensor& x, double exponent) {
  MT_BUILTIN_OP("mt::pow", Tensor(const Tensor&, double));
  return op(x, exponent);
}

}  // namespace mt
