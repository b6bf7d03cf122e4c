// The name expressions of the GPU op kernels (kernels/cuda/elementwise.cu, reduce.cu,
// softmax.cu, random.cu): what NVRTC instantiates, and the full lists the tests compile.
#pragma once

#include <string>
#include <vector>

#include "kernels/jit/builtin.h"
#include "runtime/dtype.h"

namespace mt::gpu {

// The functors of elementwise.cu (struct mt::op::<functor>).
enum class EwFn {
  Neg, Exp, Log, Sqrt, Abs, Sign, Sigmoid, Tanh, Relu, Pow, AddS, SubS, MulS, DivS,
  Add, Sub, Mul, Div, SquaredDiff,
};
inline constexpr int kNumEwFns = int(EwFn::SquaredDiff) + 1;

struct EwFnInfo {
  const char* name;     // the op, for messages: "exp"
  const char* functor;  // "Exp"
  int arity;            // tensor operands: 1 or 2
  bool int_ok;          // has an int64 instantiation
};
const EwFnInfo& ew_fn_info(EwFn fn);

// "unary_op<float, mt::op::Exp>", "binary_op_strided<mt::Half, mt::op::Add>".
std::string ew_name_expression(EwFn fn, DType t, bool strided);

enum class ReduceKind { Sum, Max };
// "reduce_rows<float, float, mt::SumR, false>": In is the input dtype (the original one
// also for passes over partials, which FromAcc marks), Out the result's.
std::string reduce_name_expression(ReduceKind kind, bool rows, DType in, DType out, bool from_acc);
// The result dtype of a reduction kernel over `in`: sum of bool is int64, else in.
DType reduce_out_dtype(ReduceKind kind, DType in);

std::string softmax_name_expression(DType t, bool log);
std::string random_name_expression(DType t, bool normal);

// Every kernel of the four files, each file with all its name expressions.
std::vector<jit::EmbeddedKernelFile> kernel_files();

}  // namespace mt::gpu
