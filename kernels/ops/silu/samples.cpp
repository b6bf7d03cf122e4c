// SPDX-License-Identifier: MIT
// The op harness's samples of mt::silu_backward (tests/test_ops.cpp runs them: values
// against the float64 reference below, opcheck, double backward, and the same on cuda:0).
// mt::silu's own come from its row of the elementwise table, as every row's do.
#include <cmath>

#include "kernels/ops.h"
#include "kernels/ops/silu/silu.h"

namespace mt::ops {

std::vector<OpSamples> silu_samples() {
  constexpr DType F32 = DType::Float32, F64 = DType::Float64;
  OpSamples bwd;
  bwd.op = "mt::silu_backward";
  bwd.samples = {
      {"[3, 4]", {sample_tensor({3, 4}, F64, 1), sample_tensor({3, 4}, F64, 2)}},
      {"0-d", {sample_tensor({}, F64, 3), sample_tensor({}, F64, 4)}},
      {"transposed and stepped [2, 3]",
       {sample_tensor({3, 2}, F64, 5).t(), sample_tensor({2, 6}, F64, 6).slice(1, 0, 6, 2)}},
      {"float32 [7]", {sample_tensor({7}, F32, 7), sample_tensor({7}, F32, 8)}},
      {"big [50, 41] float32", {sample_tensor({50, 41}, F32, 9), sample_tensor({50, 41}, F32, 10)}},
  };
  bwd.reference = [](const Stack& args) {
    const Tensor &g = args[0].to_tensor(), &x = args[1].to_tensor();
    Tensor out = empty(x.sizes(), {.dtype = DType::Float64});
    const double *gp = g.data_ptr<double>(), *xp = x.data_ptr<double>();
    double* o = out.data_ptr<double>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      const double s = 1 / (1 + std::exp(-xp[i]));
      o[i] = gp[i] * s * (1 + xp[i] * (1 - s));
    }
    return std::vector<Tensor>{out};
  };
  return {bwd};
}

}  // namespace mt::ops
