// SPDX-License-Identifier: MIT
// The op harness's samples of mt::foreach_add_ (tests/test_ops.cpp runs them: the values of
// every pair against the float64 reference below, version bumps, opcheck, and the same on
// cuda:0). Lists of pairs of one shape each: mixed dtypes, layouts and sizes in one list, a
// pair of int64 (alpha an integer there), alpha by default and not.
#include <optional>
#include <utility>

#include "kernels/ops.h"
#include "kernels/ops/foreach/foreach.h"

namespace mt::ops {
namespace {

OpSample foreach_sample(std::string label, const std::vector<std::pair<Tensor, Tensor>>& pairs,
                        std::optional<double> alpha) {
  std::vector<Tensor> self, other;
  for (const auto& [s, o] : pairs) self.push_back(s), other.push_back(o);
  Stack args{self, other};
  if (alpha) args.push_back(*alpha);
  return {std::move(label), args};
}

}  // namespace

std::vector<OpSamples> foreach_samples() {
  constexpr DType F32 = DType::Float32, F64 = DType::Float64, F16 = DType::Float16,
                  BF16 = DType::BFloat16, I64 = DType::Int64;
  SampleSeeds t{1};
  OpSamples o;
  o.op = "mt::foreach_add_";
  o.samples = {
      foreach_sample("[3, 4], [4], 0-d float64",
                     {{t({3, 4}), t({3, 4})}, {t({4}), t({4})}, {t({}), t({})}}, std::nullopt),
      foreach_sample("float32 params, alpha -0.5",
                     {{t({2, 3}, F32), t({2, 3}, F32)},
                      {t({7}, F32), t({7}, F32)},
                      {t({0}, F32), t({0}, F32)}},
                     -0.5),
      foreach_sample("float32 self, float64 and float16 others; transposed; int64",
                     {{t({3, 4}, F32), t({3, 4})},
                      {t({5}, F32), t({5}, F16)},
                      {sample_view(SampleLayout::Transposed, {3, 4}, F64, 100),
                       sample_view(SampleLayout::Stepped, {3, 4}, F64, 101)},
                      {t({4}, I64, -5, 5), t({4}, I64, -5, 5)}},
                     3.0),
      foreach_sample("bfloat16 and float16 params",
                     {{t({6}, BF16), t({6}, BF16)}, {t({2, 3}, F16), t({2, 3}, F16)}}, 2.0),
      foreach_sample("big [40, 65] float32 and [129] float32",
                     {{t({40, 65}, F32), t({40, 65}, F32)}, {t({129}, F32), t({129}, F32)}}, -1.5),
  };
  // self[i] + alpha * other[i] for each pair (alpha defaults to 1).
  o.reference = [](const Stack& a) {
    const std::vector<Tensor> self = a[0].to_tensor_list(), other = a[1].to_tensor_list();
    const double alpha = a.size() > 2 ? a[2].to_double() : 1.0;
    std::vector<Tensor> out;
    for (size_t i = 0; i < self.size(); ++i) {
      const double *s = self[i].data_ptr<double>(), *p = other[i].data_ptr<double>();
      std::vector<double> v(size_t(self[i].numel()));
      for (size_t j = 0; j < v.size(); ++j) v[j] = s[j] + alpha * p[j];
      out.push_back(f64_tensor(self[i].sizes(), v));
    }
    return out;
  };
  o.double_backward = false;  // it writes its inputs: no autograd formula
  return {o};
}

}  // namespace mt::ops
