// SPDX-License-Identifier: MIT
#include "kernels/cuda_host/names.h"

#include "runtime/error.h"

namespace mt::gpu {

std::string ew_name_expression(ew::Fn fn, DType t, bool strided) {
  const ew::Row& r = ew::row(fn);
  MT_ASSERT(r.has_device_functor(), "[{}] has no functor in elementwise.cu", r.name);
  return fmt::format("{}_op{}<{}, mt::op::{}>", r.tensor_operands() == 1 ? "unary" : "binary",
                     strided ? "_strided" : "", jit::kernel_type_name(t), r.id);
}

std::string ew_bcast_name_expression(ew::Fn fn, DType t, DType tx, DType ty) {
  const ew::Row& r = ew::row(fn);
  MT_ASSERT(r.arity == ew::Arity::Binary && r.has_device_functor(),
            "[{}] has no binary functor for binary_op_bcast", r.name);
  return fmt::format("binary_op_bcast<{}, {}, {}, mt::op::{}>", jit::kernel_type_name(t),
                     jit::kernel_type_name(tx), jit::kernel_type_name(ty), r.id);
}

bool ew_has_kernel(ew::Fn fn, DType t) {
  return ew::row(fn).has_device_functor() &&
         (is_floating(t) || (t == DType::Int64 && ew::row(fn).int_ok()));
}

std::string foreach_name_expression(ew::Fn fn, DType t) {
  const ew::Row& r = ew::row(fn);
  MT_ASSERT(r.arity == ew::Arity::Binary && r.has_device_functor(),
            "[{}] has no binary functor for foreach_binary_op", r.name);
  return fmt::format("foreach_binary_op<{}, mt::op::{}>", jit::kernel_type_name(t), r.id);
}

DType reduce_out_dtype(ReduceKind kind, DType in) {
  return kind == ReduceKind::Sum && in == DType::Bool ? DType::Int64 : in;
}

std::string reduce_name_expression(ReduceKind kind, bool rows, DType in, DType out, bool from_acc) {
  return fmt::format("reduce_{}<{}, {}, mt::{}, {}>", rows ? "rows" : "cols",
                     jit::kernel_type_name(in), jit::kernel_type_name(out),
                     kind == ReduceKind::Sum ? "SumR" : "MaxR", from_acc ? "true" : "false");
}

std::string random_name_expression(DType t, bool normal) {
  return fmt::format("random_{}<{}>", normal ? "normal" : "uniform", jit::kernel_type_name(t));
}

std::vector<jit::EmbeddedKernelFile> all_kernel_files() {
  const DType floats[] = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16};
  jit::EmbeddedKernelFile ew{"elementwise.cu", {}}, red{"reduce.cu", {}}, rnd{"random.cu", {}};
  for (const ew::Row& r : ew::kRows)
    for (int t = 0; t < kNumDTypes; ++t) {
      if (!ew_has_kernel(r.fn, DType(t))) continue;
      for (bool strided : {false, true})
        ew.name_expressions.push_back(ew_name_expression(r.fn, DType(t), strided));
    }
  // The broadcast kernel in every float dtype, and with a 16-bit input beside a float32 one
  // for add and mul (autocast's bias add and scaling); other mixes compile on first use.
  for (const ew::Row& r : ew::kRows) {
    if (r.arity != ew::Arity::Binary || !r.has_device_functor()) continue;
    for (DType t : floats) ew.name_expressions.push_back(ew_bcast_name_expression(r.fn, t, t, t));
    if (r.fn != ew::Fn::Add && r.fn != ew::Fn::Mul) continue;
    for (DType h : {DType::Float16, DType::BFloat16}) {
      ew.name_expressions.push_back(
          ew_bcast_name_expression(r.fn, DType::Float32, h, DType::Float32));
      ew.name_expressions.push_back(
          ew_bcast_name_expression(r.fn, DType::Float32, DType::Float32, h));
    }
  }
  for (ew::Fn fn : kForeachFns)
    for (int t = 0; t < kNumDTypes; ++t)
      if (ew_has_kernel(fn, DType(t)))
        ew.name_expressions.push_back(foreach_name_expression(fn, DType(t)));
  for (ReduceKind kind : {ReduceKind::Sum, ReduceKind::Max})
    for (int t = 0; t < kNumDTypes; ++t) {
      const DType dt = DType(t);
      if (kind == ReduceKind::Max && dt == DType::Bool) continue;  // through int64
      for (bool rows : {true, false})
        for (bool from_acc : {false, true})
          red.name_expressions.push_back(
              reduce_name_expression(kind, rows, dt, reduce_out_dtype(kind, dt), from_acc));
    }
  for (DType t : floats)
    for (bool normal : {false, true})
      rnd.name_expressions.push_back(random_name_expression(t, normal));
  std::vector<jit::EmbeddedKernelFile> files = jit::embedded_kernels();
  for (auto* f : {&ew, &red, &rnd}) files.push_back(std::move(*f));
  return files;
}

}  // namespace mt::gpu
