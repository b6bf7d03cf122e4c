// SPDX-License-Identifier: MIT
// mt::add, sub, mul, div (tensor and scalar forms) and the in-place add_, sub_, mul_.
// Broadcasting and type promotion happen here; kernels/cpu computes.
#include <cmath>
#include <source_location>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cuda_host/gpu_kernels.h"
#include "kernels/elementwise_rows.h"
#include "kernels/ops/pointwise_eval.h"
#include "kernels/ops/registry.h"
#include "runtime/view.h"

namespace mt {
namespace ops {
namespace {

using cpu::BinaryOp;

// "add": the op's name in messages, from its row of kernels/elementwise_table.h.
const char* name_of(BinaryOp op) { return ew::row(op).name.data(); }

// The output of `a op b`: the broadcast shape and the promoted dtype (div of integers is
// float, as in PyTorch). Under FakeMode (the Fake kernel) this makes a fake tensor.
Tensor binary_result(const Tensor& a, const Tensor& b, BinaryOp op) {
  MT_CHECK(a.device() == b.device(),
           "[{}] the inputs are on different devices ({} and {}); move one with .to()", name_of(op),
           a.device(), b.device());
  DType t = promote_types(a.dtype(), b.dtype());
  if (!ew::row(op).keeps_dtype()) t = float_result(t);  // div of integers is float
  // Same shapes, the common case: nothing to broadcast, and no Shape built and dropped (a
  // tenth of a 1-element add's instructions went to broadcast_shapes, by callgrind).
  if (a.sizes() == b.sizes()) return empty(a.sizes(), {.dtype = t, .device = a.device()});
  Shape shape = detail::broadcast_shapes(a.sizes(), b.sizes(), name_of(op));
  return empty(shape, {.dtype = t, .device = a.device()});
}

Tensor scalar_result(const Tensor& a, BinaryOp op) {
  DType t = ew::row(op).keeps_dtype() ? a.dtype() : float_result(a.dtype());
  return empty(a.sizes(), {.dtype = t, .device = a.device()});
}

// The gradient for an input of shape/dtype `like` from a broadcast gradient.
Tensor reduce_grad(const Tensor& g, const Tensor& like) {
  Tensor r = g.sizes() == like.sizes() ? g : sum_to(g, like.sizes());
  return r.dtype() == like.dtype() ? r : r.to(like.dtype());
}

// add and sub take `*, float alpha=1.0` (Alpha is double); mul and div take none (Alpha is
// empty): a schema lists only what the kernels read (the ops harness checks that every
// argument changes the result). The kernels' alpha is then 1.
template <typename... Alpha>
double alpha_or_one(Alpha... alpha) {
  return (1.0 * ... * alpha);
}

// The kernels of one op: Compute is cpu::binary or gpu::binary (likewise below).
template <BinaryOp Op, auto Compute, typename... Alpha>
Tensor tensor_form(const Tensor& a, const Tensor& b, Alpha... alpha) {
  Tensor out = binary_result(a, b, Op);
  Compute(Op, a, b, out, alpha_or_one(alpha...));
  return out;
}

template <BinaryOp Op, auto Compute>
Tensor scalar_form(const Tensor& a, double s) {
  Tensor out = scalar_result(a, Op);
  Compute(Op, a, s, out);
  return out;
}

// "Float32" for DType::Float32: how the fix is spelled in C++.
const char* enumerator_name(DType t) {
  switch (t) {
    case DType::Float32:
      return "Float32";
    case DType::Float64:
      return "Float64";
    case DType::Float16:
      return "Float16";
    case DType::BFloat16:
      return "BFloat16";
    case DType::Int64:
      return "Int64";
    case DType::Bool:
      return "Bool";
  }
  return "?";
}

// What an in-place op checks, real or fake: the result keeps self's shape, and its dtype
// (promoted, as the out-of-place op's) can be cast to self's, as in PyTorch (can_cast).
void check_inplace(const Tensor& self, const Tensor& other, double alpha, BinaryOp op) {
  Shape b = detail::broadcast_shapes(self.sizes(), other.sizes(), name_of(op));
  MT_CHECK(b == self.sizes(),
           "[{}_] cannot write the result of shape {} into self of shape {}; in-place ops "
           "keep self's shape",
           name_of(op), b, self.sizes());
  DType result = promote_types(self.dtype(), other.dtype());
  MT_CHECK(can_cast(result, self.dtype()),
           "[{}_] result type {} can't be cast to the desired output type {} (self's dtype): "
           "{}_ writes into self. Convert self first (self.to(mt::DType::{})) or use the "
           "out-of-place mt::{}",
           name_of(op), result, self.dtype(), name_of(op), enumerator_name(result), name_of(op));
  MT_CHECK(is_floating(self.dtype()) || alpha == std::trunc(alpha),
           "[{}_] alpha {} is not an integer, so the result can't be written into self of dtype "
           "{}; use an integer alpha or a floating self",
           name_of(op), alpha, self.dtype());
}

template <BinaryOp Op, auto Compute, typename... Alpha>
Tensor inplace_form(const Tensor& self, const Tensor& other, Alpha... alpha) {
  check_inplace(self, other, alpha_or_one(alpha...), Op);
  Compute(Op, self, other, self, alpha_or_one(alpha...));
  return self;
}

// loc, in each of these: the caller's line, what `minitensor dump` shows. The backward of
// each form is its row's (kernels/elementwise_table.h), evaluated with dispatched ops.
template <BinaryOp Op, typename... Alpha>
void register_tensor_form(const std::string& name, const std::string& schema,
                          std::source_location loc = std::source_location::current()) {
  auto op = custom_op(name, tensor_form<Op, cpu::binary, Alpha...>, {.schema = schema}, loc);
  op.register_kernel(DeviceType::CUDA, tensor_form<Op, gpu::binary, Alpha...>, loc);
  op.register_fake(
      [](const Tensor& a, const Tensor& b, Alpha...) { return binary_result(a, b, Op); }, loc);
  op.register_autograd(
      [](AutogradContext& ctx, const Tensor& g) {
        auto s = ctx.saved();
        const Tensor in[] = {s[0], s[1], g};
        const double alpha[] = {sizeof...(Alpha) > 0 ? std::any_cast<double>(ctx.data["alpha"])
                                                     : 1.0};
        const bool wanted[] = {ctx.needs_input_grad(0), ctx.needs_input_grad(1)};
        auto grads = eval_with_ops(name_of(Op), row_backward(Op), in, alpha, wanted);
        Tensor ga = wanted[0] ? reduce_grad(grads[0], s[0]) : Tensor();
        Tensor gb = wanted[1] ? reduce_grad(grads[1], s[1]) : Tensor();
        return std::tuple<Tensor, Tensor>(ga, gb);
      },
      [](AutogradContext& ctx, const Tensor& a, const Tensor& b, Alpha... alpha, const Tensor&) {
        ctx.save_for_backward({a, b});
        if constexpr (sizeof...(Alpha) > 0) ctx.data["alpha"] = alpha_or_one(alpha...);
      },
      loc);
  keep(op);
}

template <BinaryOp Op>
void register_scalar_form(const std::string& name,
                          std::source_location loc = std::source_location::current()) {
  auto op = custom_op(name, scalar_form<Op, cpu::binary_scalar>,
                      {.schema = "(Tensor self, float other) -> Tensor"}, loc);
  op.register_kernel(DeviceType::CUDA, scalar_form<Op, gpu::binary_scalar>, loc);
  op.register_fake([](const Tensor& a, double) { return scalar_result(a, Op); }, loc);
  op.register_autograd(
      [](AutogradContext& ctx, const Tensor& g) {
        const auto saved = ctx.saved();
        const Tensor in[] = {saved.empty() ? Tensor() : saved[0], g};
        const double s[] = {std::any_cast<double>(ctx.data["other"])};
        return eval_with_ops(name_of(Op), row_backward(Op), in, s)[0];
      },
      [](AutogradContext& ctx, const Tensor& a, double s, const Tensor&) {
        if (reads_input(row_backward(Op), 0)) ctx.save_for_backward(a);
        ctx.data["other"] = s;
      },
      loc);
  keep(op);
}

// Every Binary row (an op of its own) as mt::<name>, with `*, float alpha=1.0` when its
// forward reads s, and every Scalar row but pow (kernels/ops/unary.cpp) as
// mt::<name>.Scalar: a new row needs no line here.
template <size_t... I>
void register_rows(std::index_sequence<I...>, std::source_location loc) {
  auto one = [&]<size_t K>() {
    constexpr ew::Row r = ew::kRows[K];
    if constexpr (r.arity == ew::Arity::Binary && !r.kernel_only()) {
      if constexpr (r.reads_scalar())
        register_tensor_form<r.fn, double>(
            ew::op_name(r), "(Tensor self, Tensor other, *, float alpha=1.0) -> Tensor", loc);
      else
        register_tensor_form<r.fn>(ew::op_name(r), "(Tensor self, Tensor other) -> Tensor", loc);
    } else if constexpr (r.arity == ew::Arity::Scalar && r.fn != ew::Fn::Pow) {
      register_scalar_form<r.fn>(ew::op_name(r), loc);
    }
  };
  (one.template operator()<I>(), ...);
}

template <BinaryOp Op, typename... Alpha>
void register_inplace(const char* name, const char* schema,
                      std::source_location loc = std::source_location::current()) {
  auto op = custom_op(name, inplace_form<Op, cpu::binary, Alpha...>, {.schema = schema}, loc);
  op.register_kernel(DeviceType::CUDA, inplace_form<Op, gpu::binary, Alpha...>, loc);
  op.register_fake(
      [](const Tensor& self, const Tensor& other, Alpha... alpha) {
        check_inplace(self, other, alpha_or_one(alpha...), Op);
        return self;
      },
      loc);
  keep(op);
}

}  // namespace

void register_binary() {
  register_rows(std::make_index_sequence<ew::kNumFns>{}, std::source_location::current());
  register_inplace<BinaryOp::Add, double>(
      "mt::add_", "(Tensor(a!) self, Tensor other, *, float alpha=1.0) -> Tensor(a!)");
  register_inplace<BinaryOp::Sub, double>(
      "mt::sub_", "(Tensor(a!) self, Tensor other, *, float alpha=1.0) -> Tensor(a!)");
  register_inplace<BinaryOp::Mul>("mt::mul_", "(Tensor(a!) self, Tensor other) -> Tensor(a!)");
}

}  // namespace ops

using TensorTensorAlphaOp = Tensor(const Tensor&, const Tensor&, double);
using TensorTensorOp = Tensor(const Tensor&, const Tensor&);
using TensorScalarOp = Tensor(const Tensor&, double);

Tensor add(const Tensor& a, const Tensor& b, double alpha) {
  MT_BUILTIN_OP("mt::add", TensorTensorAlphaOp);
  return op(a, b, alpha);
}
Tensor sub(const Tensor& a, const Tensor& b, double alpha) {
  MT_BUILTIN_OP("mt::sub", TensorTensorAlphaOp);
  return op(a, b, alpha);
}
Tensor mul(const Tensor& a, const Tensor& b) {
  MT_BUILTIN_OP("mt::mul", TensorTensorOp);
  return op(a, b);
}
Tensor div(const Tensor& a, const Tensor& b) {
  MT_BUILTIN_OP("mt::div", TensorTensorOp);
  return op(a, b);
}
Tensor add(const Tensor& a, double b) {
  MT_BUILTIN_OP("mt::add.Scalar", TensorScalarOp);
  return op(a, b);
}
Tensor sub(const Tensor& a, double b) {
  MT_BUILTIN_OP("mt::sub.Scalar", TensorScalarOp);
  return op(a, b);
}
Tensor mul(const Tensor& a, double b) {
  MT_BUILTIN_OP("mt::mul.Scalar", TensorScalarOp);
  return op(a, b);
}
Tensor div(const Tensor& a, double b) {
  MT_BUILTIN_OP("mt::div.Scalar", TensorScalarOp);
  return op(a, b);
}

const Tensor& add_(const Tensor& self, const Tensor& other, double alpha) {
  MT_BUILTIN_OP("mt::add_", TensorTensorAlphaOp);
  op(self, other, alpha);
  return self;
}
const Tensor& sub_(const Tensor& self, const Tensor& other, double alpha) {
  MT_BUILTIN_OP("mt::sub_", TensorTensorAlphaOp);
  op(self, other, alpha);
  return self;
}
const Tensor& mul_(const Tensor& self, const Tensor& other) {
  MT_BUILTIN_OP("mt::mul_", TensorTensorOp);
  op(self, other);
  return self;
}
const Tensor& mul_(const Tensor& self, double other) {
  // The scalar takes self's dtype, so it must hold a value of it: a C++ double holding an
  // integer counts as one for an int64 self (PyTorch refuses every float scalar there).
  MT_CHECK(is_floating(self.dtype()) || (self.dtype() == DType::Int64 ? other == std::trunc(other)
                                                                      : other == 0 || other == 1),
           "[mul_] result type float32 can't be cast to the desired output type {} (self's "
           "dtype): the scalar {} has no exact {} value. Convert self first "
           "(self.to(mt::DType::Float32)) or use the out-of-place mt::mul",
           self.dtype(), other, self.dtype());
  return mul_(self, scalar_tensor(other, {.dtype = self.dtype(), .device = self.device()}));
}

}  // namespace mt
