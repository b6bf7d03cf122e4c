// SPDX-License-Identifier: MIT
// The op harness's samples of mt::mse_loss (tests/test_ops.cpp runs them: values against
// the float64 reference below, opcheck, double backward, and the same on cuda:0).
#include <cmath>

#include "kernels/ops.h"
#include "kernels/ops/loss/loss.h"

namespace mt::ops {

std::vector<OpSamples> loss_samples() {
  constexpr DType F32 = DType::Float32, F64 = DType::Float64, F16 = DType::Float16;
  OpSamples o;
  o.op = "mt::mse_loss";
  o.samples = {
      {"[3, 4]", {sample_tensor({3, 4}, F64, 1), sample_tensor({3, 4}, F64, 2)}},
      {"0-d", {sample_tensor({}, F64, 3), sample_tensor({}, F64, 4)}},
      {"odd [7] float32", {sample_tensor({7}, F32, 5), sample_tensor({7}, F32, 6)}},
      {"transposed [2, 3] and contiguous",
       {sample_view(SampleLayout::Transposed, {2, 3}, F64, 7), sample_tensor({2, 3}, F64, 8)}},
      {"float16 [2, 3] and float32 [2, 3]",
       {sample_tensor({2, 3}, F16, 9), sample_tensor({2, 3}, F32, 10)}},
      {"empty [0] (NaN)", {sample_tensor({0}, F64, 11), sample_tensor({0}, F64, 12)}},
      {"big [70, 40] float32",
       {sample_tensor({70, 40}, F32, 13), sample_tensor({70, 40}, F32, 14)}},
  };
  // mean((input - target)^2) over every element: NaN (0 / 0) for empty inputs.
  o.reference = [](const Stack& a) {
    const Tensor &x = a[0].to_tensor(), &t = a[1].to_tensor();
    const double *px = x.data_ptr<double>(), *pt = t.data_ptr<double>();
    double s = 0;
    for (int64_t i = 0; i < x.numel(); ++i) s += (px[i] - pt[i]) * (px[i] - pt[i]);
    return std::vector<Tensor>{f64_tensor({}, {s / double(x.numel())})};
  };
  return {o};
}

}  // namespace mt::ops
