// SPDX-License-Identifier: MIT
// The op harness's samples of mt::matmul (tests/test_ops.cpp runs them: values against the
// float64 reference below, opcheck, double backward, and the same on cuda:0, where cuBLAS
// refuses the integer sample as the harness expects).
#include <algorithm>

#include "kernels/ops.h"
#include "kernels/ops/matmul/matmul.h"

namespace mt::ops {
namespace {

// The broadcast of two batch shapes, aligned right (they are known to broadcast).
Shape matmul_batch_shape(const Shape& a, const Shape& b) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t x = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t y = i < n - b.size() ? 1 : b[i - (n - b.size())];
    out[i] = x == 1 ? y : x;
  }
  return out;
}

// The row-major offset in shape s of index idx, aligned right; size-1 dims take any index.
int64_t matmul_offset(const std::vector<int64_t>& idx, const Shape& s) {
  int64_t flat = 0;
  const size_t lead = idx.size() - s.size();
  for (size_t d = 0; d < s.size(); ++d) flat = flat * s[d] + (s[d] == 1 ? 0 : idx[lead + d]);
  return flat;
}

// a @ b as torch.matmul, contiguous float64, with plain loops: a 1-d a is [1, k], a 1-d b
// [k, 1] (the dim dropped from the result), the batch dims broadcast.
Tensor matmul_reference(const Tensor& a, const Tensor& b) {
  Shape as = a.sizes(), bs = b.sizes();
  const bool a_vec = as.size() == 1, b_vec = bs.size() == 1;
  if (a_vec) as.insert(0, 1);
  if (b_vec) bs.push_back(1);
  const int64_t m = as[as.size() - 2], k = as.back(), n = bs.back();
  const Shape batch =
      matmul_batch_shape(Shape(std::span<const int64_t>(as.begin(), as.size() - 2)),
                         Shape(std::span<const int64_t>(bs.begin(), bs.size() - 2)));
  Shape result = batch;
  if (!a_vec) result.push_back(m);
  if (!b_vec) result.push_back(n);
  const double *pa = a.data_ptr<double>(), *pb = b.data_ptr<double>();
  std::vector<double> v;
  std::vector<int64_t> ia(batch.size() + 2), ib(batch.size() + 2);
  for (int64_t t = 0; t < shape_numel(batch); ++t) {
    int64_t rem = t;
    for (size_t d = batch.size(); d-- > 0;) {
      ia[d] = ib[d] = rem % batch[d];
      rem /= batch[d];
    }
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t kk = 0; kk < k; ++kk) {
          ia[batch.size()] = i, ia[batch.size() + 1] = kk;
          ib[batch.size()] = kk, ib[batch.size() + 1] = j;
          s += pa[matmul_offset(ia, as)] * pb[matmul_offset(ib, bs)];
        }
        v.push_back(s);
      }
  }
  return f64_tensor(result, v);
}

}  // namespace

std::vector<OpSamples> matmul_samples() {
  constexpr DType F32 = DType::Float32, F64 = DType::Float64, F16 = DType::Float16,
                  I64 = DType::Int64;
  SampleSeeds t{1};
  OpSamples o;
  o.op = "mt::matmul";
  o.samples = {
      {"[2, 3] @ [3, 4]", {t({2, 3}), t({3, 4})}},
      {"[3] @ [3, 2]", {t({3}), t({3, 2})}},
      {"[2, 3] @ [3]", {t({2, 3}), t({3})}},
      {"[3] @ [3]", {t({3}), t({3})}},
      {"[2, 2, 3] @ [3, 2]", {t({2, 2, 3}), t({3, 2})}},
      {"[2, 1, 2, 3] @ [3, 3, 2]", {t({2, 1, 2, 3}), t({3, 3, 2})}},
      {"[4] @ [2, 4, 2]", {t({4}), t({2, 4, 2})}},
      {"transposed [2, 3] @ stepped [3, 2]",
       {sample_view(SampleLayout::Transposed, {2, 3}, F64, 100),
        sample_view(SampleLayout::Stepped, {3, 2}, F64, 101)}},
      {"[2, 0] @ [0, 3] (zeros)", {t({2, 0}), t({0, 3})}},
      {"float32 [3, 4] @ float64 [4, 2]", {t({3, 4}, F32), t({4, 2})}},
      {"float16 [2, 3] @ float16 [3, 2]", {t({2, 3}, F16), t({3, 2}, F16)}},
      {"int64 [2, 3] @ int64 [3, 2]", {t({2, 3}, I64, -5, 5), t({3, 2}, I64, -5, 5)}},
      {"big [33, 65] @ [65, 17] float32", {t({33, 65}, F32, 0.5, 1.5), t({65, 17}, F32, 0.5, 1.5)}},
  };
  o.reference = [](const Stack& a) {
    return std::vector<Tensor>{matmul_reference(a[0].to_tensor(), a[1].to_tensor())};
  };
  return {o};
}

}  // namespace mt::ops
