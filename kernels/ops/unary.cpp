// SPDX-License-Identifier: MIT
// The elementwise unary ops: each Unary row of kernels/elementwise_table.h (mt::neg, exp,
// ..., gelu) registered here from its row, backward included, and given its public
// function; and mt::pow (scalar exponent). mt::silu, a row with kernels of its own, registers in
// kernels/ops/silu/. Float- valued ops give float32 for int64/bool inputs (as PyTorch); the
// kKeepDtype rows keep the dtype. Backwards are dispatched ops, so they differentiate again.
#include <cmath>
#include <source_location>
#include <string>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cuda_host/gpu_kernels.h"
#include "kernels/elementwise_rows.h"
#include "kernels/ops/pointwise_eval.h"
#include "kernels/ops/registry.h"

namespace mt {
namespace ops {
namespace {

// The output of a unary op: x's shape; keeps_dtype ops keep int64, others go float.
Tensor unary_result(const Tensor& x, bool keeps_dtype) {
  DType t = keeps_dtype ? x.dtype() : float_result(x.dtype());
  return empty(x.sizes(), {.dtype = t, .device = x.device()});
}

// Registers row `r` of the elementwise table as its op (mt::exp, ...): CPU and CUDA
// kernels computing the row's functors, a fake kernel with the result's shape and dtype,
// and the row's backward expression evaluated with dispatched ops (so it differentiates
// again). Every Unary row without kernels of its own comes through here, from the table:
// a new row needs no line in this file.
// Note [Saved inputs, not outputs]: the backward gets the saved input, and exp, sigmoid
// and tanh recompute f(x) from it (one more op in backward), so every formula is written
// in x alone. Saving the output would work too: the autograd kernel sets an output's
// history before setup_context runs, and a saved output gets its grad_fn back when
// unpacked, so double backward flows through it (tests/test_autograd.cpp, "saved outputs
// keep their gradient path"). Saving x is a choice of style here, not a necessity.
void register_unary_row(const ew::Row& r, std::source_location loc) {
  const ew::Fn fn = r.fn;
  const bool keeps = r.keeps_dtype();
  auto op = custom_op(
      ew::op_name(r),
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
      [fn, name = r.name](AutogradContext& ctx, const Tensor& g) {
        const Tensor in[] = {ctx.saved()[0], g};
        return eval_with_ops(name, row_backward(fn), in, {})[0];
      },
      [](AutogradContext& ctx, const Tensor& x, const Tensor&) { ctx.save_for_backward(x); }, loc);
  keep(op);
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
  // The row's backward: p x^(p-1), exactly 0 for p == 0 (not 0 * x^-1, NaN at x = 0).
  op.register_autograd(
      [](AutogradContext& ctx, const Tensor& g) {
        const Tensor in[] = {ctx.saved()[0], g};
        const double p[] = {std::any_cast<double>(ctx.data["exponent"])};
        return eval_with_ops("pow", row_backward(ew::Fn::Pow), in, p)[0];
      },
      [](AutogradContext& ctx, const Tensor& x, double e, const Tensor&) {
        ctx.save_for_backward(x);
        ctx.data["exponent"] = e;
      });
  keep(op);
}

}  // namespace

void register_unary() {
  for (const ew::Row& r : ew::kRows)
    if (r.arity == ew::Arity::Unary && !r.own_kernels())
      register_unary_row(r, std::source_location::current());
  register_pow();
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
