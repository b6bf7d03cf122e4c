#include "kernels/gpu/names.h"

#include "runtime/error.h"

namespace mt::gpu {

const EwFnInfo& ew_fn_info(EwFn fn) {
  static const EwFnInfo infos[kNumEwFns] = {
      {"neg", "Neg", 1, true},       {"exp", "Exp", 1, false},
      {"log", "Log", 1, false},      {"sqrt", "Sqrt", 1, false},
      {"abs", "Abs", 1, true},       {"sign", "Sign", 1, true},
      {"sigmoid", "Sigmoid", 1, false}, {"tanh", "Tanh", 1, false},
      {"relu", "Relu", 1, true},     {"pow", "Pow", 1, true},
      {"add", "AddS", 1, true},      {"sub", "SubS", 1, true},
      {"mul", "MulS", 1, true},      {"div", "DivS", 1, false},
      {"add", "Add", 2, true},       {"sub", "Sub", 2, true},
      {"mul", "Mul", 2, true},       {"div", "Div", 2, false},
      {"mse_loss", "SquaredDiff", 2, false},
  };
  MT_ASSERT(int(fn) >= 0 && int(fn) < kNumEwFns, "unknown EwFn {}", int(fn));
  return infos[int(fn)];
}

std::string ew_name_expression(EwFn fn, DType t, bool strided) {
  const EwFnInfo& info = ew_fn_info(fn);
  return fmt::format("{}_op{}<{}, mt::op::{}>", info.arity == 1 ? "unary" : "binary",
                     strided ? "_strided" : "", jit::kernel_type_name(t), info.functor);
}

DType reduce_out_dtype(ReduceKind kind, DType in) {
  return kind == ReduceKind::Sum && in == DType::Bool ? DType::Int64 : in;
}

std::string reduce_name_expression(ReduceKind kind, bool rows, DType in, DType out, bool from_acc) {
  return fmt::format("reduce_{}<{}, {}, mt::{}, {}>", rows ? "rows" : "cols",
                     jit::kernel_type_name(in), jit::kernel_type_name(out),
                     kind == ReduceKind::Sum ? "SumR" : "MaxR", from_acc ? "true" : "false");
}

std::string softmax_name_expression(DType t, bool log) {
  return fmt::format("softmax_rows<{}, {}>", jit::kernel_type_name(t), log ? "true" : "false");
}

std::string random_name_expression(DType t, bool normal) {
  return fmt::format("random_{}<{}>", normal ? "normal" : "uniform", jit::kernel_type_name(t));
}

std::vector<jit::EmbeddedKernelFile> kernel_files() {
  const DType floats[] = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16};
  jit::EmbeddedKernelFile ew{"elementwise.cu", {}}, red{"reduce.cu", {}}, soft{"softmax.cu", {}},
      rnd{"random.cu", {}};
  for (int f = 0; f < kNumEwFns; ++f)
    for (int t = 0; t < kNumDTypes; ++t) {
      const DType dt = DType(t);
      if (dt == DType::Bool || (dt == DType::Int64 && !ew_fn_info(EwFn(f)).int_ok)) continue;
      for (bool strided : {false, true}) ew.name_expressions.push_back(ew_name_expression(EwFn(f), dt, strided));
    }
  for (ReduceKind kind : {ReduceKind::Sum, ReduceKind::Max})
    for (int t = 0; t < kNumDTypes; ++t) {
      const DType dt = DType(t);
      if (kind == ReduceKind::Max && dt == DType::Bool) continue;  // through int64
      for (bool rows : {true, false})
        for (bool from_acc : {false, true})
          red.name_expressions.push_back(
              reduce_name_expression(kind, rows, dt, reduce_out_dtype(kind, dt), from_acc));
    }
  for (DType t : floats) {
    for (bool log : {false, true}) soft.name_expressions.push_back(softmax_name_expression(t, log));
    for (bool normal : {false, true}) rnd.name_expressions.push_back(random_name_expression(t, normal));
  }
  return {ew, red, soft, rnd};
}

}  // namespace mt::gpu
