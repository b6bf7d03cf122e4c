// SPDX-License-Identifier: MIT
// The op harness's samples of mt::softmax and mt::log_softmax (tests/test_ops.cpp runs
// them: values against the float64 reference below, opcheck, double backward, and the same
// on cuda:0).
#include <algorithm>
#include <cmath>

#include "kernels/ops.h"
#include "kernels/ops/softmax/softmax.h"

namespace mt::ops {
namespace {

// softmax (or log_softmax) of a contiguous float64 x along dim, with plain loops: each row
// along dim has its max subtracted before exp.
Tensor softmax_reference(const Tensor& x, int64_t dim, bool log) {
  Tensor out = empty(x.sizes(), {.dtype = DType::Float64});
  const int64_t nd = x.dim();
  const int64_t d = nd == 0 ? 0 : (dim < 0 ? dim + nd : dim);
  int64_t outer = 1, n = nd == 0 ? 1 : x.size(d), inner = 1;
  for (int64_t i = 0; i < d; ++i) outer *= x.size(i);
  for (int64_t i = d + 1; i < nd; ++i) inner *= x.size(i);
  const double* in = x.data_ptr<double>();
  double* o = out.data_ptr<double>();
  for (int64_t a = 0; a < outer; ++a)
    for (int64_t c = 0; c < inner; ++c) {
      auto at = [&](int64_t k) { return (a * n + k) * inner + c; };
      double top = -INFINITY, total = 0;
      for (int64_t k = 0; k < n; ++k) top = std::max(top, in[at(k)]);
      for (int64_t k = 0; k < n; ++k) total += std::exp(in[at(k)] - top);
      for (int64_t k = 0; k < n; ++k) {
        const double z = in[at(k)] - top;
        o[at(k)] = log ? z - std::log(total) : std::exp(z) / total;
      }
    }
  return out;
}

}  // namespace

std::vector<OpSamples> softmax_samples() {
  constexpr DType F32 = DType::Float32, F64 = DType::Float64, F16 = DType::Float16,
                  I64 = DType::Int64;
  const std::vector<OpSample> samples = {
      {"[3, 4] dim 1", {sample_tensor({3, 4}, F64, 1), int64_t(1)}},
      {"[3, 4] dim 0", {sample_tensor({3, 4}, F64, 2), int64_t(0)}},
      {"[2, 3, 2] dim -1", {sample_tensor({2, 3, 2}, F64, 3), int64_t(-1)}},
      {"[2, 3, 2] dim 1", {sample_tensor({2, 3, 2}, F64, 4), int64_t(1)}},
      {"0-d dim 0", {sample_tensor({}, F64, 5), int64_t(0)}},
      {"empty [0, 3] dim 1", {sample_tensor({0, 3}, F64, 6), int64_t(1)}},
      {"transposed [3, 4] dim 1", {sample_tensor({4, 3}, F64, 7).t(), int64_t(1)}},
      {"float32 [7] dim 0", {sample_tensor({7}, F32, 8), int64_t(0)}},
      {"float16 [2, 5] dim 1", {sample_tensor({2, 5}, F16, 9), int64_t(1)}},
      {"int64 [2, 3] dim 1 is float32", {sample_tensor({2, 3}, I64, 10, -3, 3), int64_t(1)}},
      {"large [4] near 1000 (stable)",
       {from_vector<double>({1000, 999, 1001, 998}, {4}).to(F32), int64_t(0)},
       false},
      {"big [33, 65] float32 dim 0", {sample_tensor({33, 65}, F32, 11), int64_t(0)}},
  };
  std::vector<OpSamples> out;
  for (bool log : {false, true}) {
    OpSamples s;
    s.op = log ? "mt::log_softmax" : "mt::softmax";
    s.samples = samples;
    s.reference = [log](const Stack& args) {
      return std::vector<Tensor>{softmax_reference(args[0].to_tensor(), args[1].to_int(), log)};
    };
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace mt::ops
