// SPDX-License-Identifier: MIT
// The name expressions of the GPU op kernels (kernels/cuda_device/elementwise.cu, reduce.cu,
// random.cu): what NVRTC instantiates, and the full lists the tests compile.
#pragma once

#include <string>
#include <vector>

#include "kernels/elementwise_rows.h"
#include "kernels/jit/builtin.h"
#include "runtime/dtype.h"

namespace mt::gpu {

// "unary_op<float, mt::op::Exp>", "binary_op_strided<mt::Half, mt::op::Add>": the template
// of the row's arity over its functor (kernels/elementwise_table.h), which must have one.
std::string ew_name_expression(ew::Fn fn, DType t, bool strided);
// Whether the row has an instantiation for dtype t: every float, int64 for kInt rows.
bool ew_has_kernel(ew::Fn fn, DType t);
// binary_op_bcast<T, TX, TY, Op> (Note [Broadcast binary kernel] in elementwise.cu).
std::string ew_bcast_name_expression(ew::Fn fn, DType t, DType tx, DType ty);
// "foreach_binary_op<float, mt::op::Add>": the multi-tensor kernel of a Binary row
// (Note [Multi-tensor apply]); instantiated for the rows foreach ops use (Add), every
// float dtype and int64.
std::string foreach_name_expression(ew::Fn fn, DType t);
inline constexpr ew::Fn kForeachFns[] = {ew::Fn::Add};

enum class ReduceKind { Sum, Max };
// "reduce_rows<float, float, mt::SumR, false>": In is the input dtype (the original one
// also for passes over partials, which FromAcc marks), Out the result's.
std::string reduce_name_expression(ReduceKind kind, bool rows, DType in, DType out, bool from_acc);
// The result dtype of a reduction kernel over `in`: sum of bool is int64, else in.
DType reduce_out_dtype(ReduceKind kind, DType in);

std::string random_name_expression(DType t, bool normal);

// Every embedded kernel file with all its name expressions: kernels/jit's own
// (jit::embedded_kernels: copy.cu) and the three above; the op folders list theirs
// (ops::OpFolder::kernel_files). The tests compile them all.
std::vector<jit::EmbeddedKernelFile> all_kernel_files();

}  // namespace mt::gpu
