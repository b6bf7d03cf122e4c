// SPDX-License-Identifier: MIT
// The op harness's samples of mt::sum, mean, max, max.dim and sum_to (tests/test_ops.cpp
// runs them: values against the float64 references below, opcheck, double backward, and the
// same on cuda:0).
#include <algorithm>
#include <cmath>
#include <functional>

#include "kernels/ops.h"
#include "kernels/ops/reduce/reduce.h"

namespace mt::ops {
namespace {

// File-scope names differ from every other file's of kernels/ops: a unity build (CI's)
// compiles several files of the sub-layer as one.
using ReduceDims = std::vector<int64_t>;
using ReduceGroup = std::vector<double>;  // the values reduced into one output element, in order

// A contiguous float64 x reduced over dims (empty: all; may be negative) with plain loops:
// f gets each output element's values in x's row-major order.
Tensor reduce_reference(const Tensor& x, ReduceDims dims, bool keepdim,
                        const std::function<double(const ReduceGroup&)>& f) {
  const int64_t nd = x.dim();
  for (int64_t& d : dims) d = d < 0 ? d + std::max<int64_t>(nd, 1) : d;
  auto reduced = [&](int64_t d) {
    return dims.empty() || std::find(dims.begin(), dims.end(), d) != dims.end();
  };
  Shape kept, out;  // kept: the keepdim form
  for (int64_t d = 0; d < nd; ++d) {
    kept.push_back(reduced(d) ? 1 : x.size(d));
    if (!reduced(d) || keepdim) out.push_back(kept.back());
  }
  std::vector<ReduceGroup> groups(size_t(shape_numel(kept)));
  const double* p = x.data_ptr<double>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    int64_t rem = i, g = 0, scale = 1;
    for (int64_t d = nd - 1; d >= 0; --d) {
      const int64_t at = rem % x.size(d);
      rem /= x.size(d);
      if (!reduced(d)) g += at * scale;
      scale *= kept[size_t(d)];
    }
    groups[size_t(g)].push_back(p[i]);
  }
  std::vector<double> v;
  for (const ReduceGroup& g : groups) v.push_back(f(g));
  return f64_tensor(out, v);
}

double group_sum(const ReduceGroup& g) {
  double s = 0;
  for (double x : g) s += x;
  return s;
}
double group_mean(const ReduceGroup& g) {
  return group_sum(g) / double(g.size());
}  // NaN when empty
// The index of the max, the first of ties.
size_t group_argmax(const ReduceGroup& g) {
  size_t at = 0;
  for (size_t i = 1; i < g.size(); ++i)
    if (g[i] > g[at]) at = i;
  return at;
}

// sum_to: x summed into `to`, aligned right, its size-1 dims taking every index.
Tensor sum_to_reference(const Tensor& x, const Shape& to) {
  std::vector<double> v(size_t(shape_numel(to)), 0.0);
  const int64_t nd = x.dim(), lead = nd - int64_t(to.size());
  const double* p = x.data_ptr<double>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    int64_t rem = i, o = 0, scale = 1;
    for (int64_t d = nd - 1; d >= lead; --d) {
      const int64_t at = rem % x.size(d), n = to[size_t(d - lead)];
      rem /= x.size(d);
      o += (n == 1 ? 0 : at) * scale;
      scale *= n;
    }
    v[size_t(o)] += p[i];
  }
  return f64_tensor(to, v);
}

// sum's and mean's samples (seeds from seed0 on): dims, keepdim, 0-d, empty, layouts,
// dtypes, and big ones; sum takes bools too.
std::vector<OpSample> sum_mean_samples(uint64_t seed0, bool bools) {
  constexpr DType F32 = DType::Float32, F16 = DType::Float16, BF16 = DType::BFloat16,
                  I64 = DType::Int64, BOOL = DType::Bool;
  SampleSeeds t{seed0};
  std::vector<OpSample> s = {
      {"[3, 4] over all", {t({3, 4}), ReduceDims{}}},
      {"[3, 4] dim 1", {t({3, 4}), ReduceDims{1}}},
      {"[2, 3, 2] dims 0, 2 keepdim", {t({2, 3, 2}), ReduceDims{2, 0}, true}},
      {"[3, 4] dim -1 keepdim", {t({3, 4}), ReduceDims{-1}, true}},
      {"0-d over all", {t({}), ReduceDims{}}},
      {"0-d dim 0", {t({}), ReduceDims{0}, true}},
      {"empty [0, 3] dim 0", {t({0, 3}), ReduceDims{0}}},
      {"transposed [3, 4] dim 0", {t.view(SampleLayout::Transposed, {3, 4}), ReduceDims{0}}},
      {"expanded [3, 4] dim 1", {t.view(SampleLayout::Expanded, {3, 4}), ReduceDims{1}}},
      {"float32 stepped [2, 3] over all",
       {t.view(SampleLayout::Stepped, {2, 3}, F32), ReduceDims{}}},
      {"float16 [4, 5] dim 1", {t({4, 5}, F16), ReduceDims{1}}},
      {"bfloat16 [6] over all", {t({6}, BF16), ReduceDims{}}},
      {"int64 [3, 4] dim 0", {t({3, 4}, I64, -9, 9), ReduceDims{0}}},
      {"big [70, 40] float32 dim 0", {t({70, 40}, F32, 0.5, 1.5), ReduceDims{0}}},
      {"big [70, 40] float32 dim 1", {t({70, 40}, F32, 0.5, 1.5), ReduceDims{1}}},
      {"big transposed [70, 40] float32 over all",
       {t.view(SampleLayout::Transposed, {70, 40}, F32, 0.5, 1.5), ReduceDims{}}},
      {"big [4096] float16 of ones (accumulates in float32)",
       {full({4096}, 1.0, {.dtype = F16}), ReduceDims{}}},
  };
  if (bools) s.push_back({"bool [3, 4] over all", {t({3, 4}, BOOL, 0, 1), ReduceDims{}}});
  return s;
}

// The dims argument of sum and mean (default: all) and keepdim (default: false).
ReduceDims reduce_dims_arg(const Stack& a) {
  return a.size() > 1 ? a[1].to_int_list() : ReduceDims{};
}
bool reduce_keepdim_arg(const Stack& a, size_t i) { return a.size() > i && a[i].to_bool(); }

OpSamples sum_or_mean_samples(bool mean) {
  OpSamples o;
  o.op = mean ? "mt::mean" : "mt::sum";
  o.samples = sum_mean_samples(mean ? 200 : 100, !mean);
  o.reference = [mean](const Stack& a) {
    return std::vector<Tensor>{reduce_reference(a[0].to_tensor(), reduce_dims_arg(a),
                                                reduce_keepdim_arg(a, 2),
                                                mean ? group_mean : group_sum)};
  };
  return o;
}

OpSamples max_samples() {
  constexpr DType F32 = DType::Float32, F64 = DType::Float64, F16 = DType::Float16,
                  I64 = DType::Int64;
  OpSamples o;
  o.op = "mt::max";
  o.samples = {
      {"[3, 4]", {sample_tensor({3, 4}, F64, 300)}},
      {"0-d", {sample_tensor({}, F64, 301)}},
      {"odd [7] float32", {sample_tensor({7}, F32, 302)}},
      {"transposed [3, 4]", {sample_view(SampleLayout::Transposed, {3, 4}, F64, 303)}},
      {"float16 [2, 3]", {sample_tensor({2, 3}, F16, 304)}},
      {"int64 [5]", {sample_tensor({5}, I64, 305, -9, 9)}},
      {"ties [1, 3, 3, 2]", {from_vector<double>({1, 3, 3, 2}, {4})}, false},
      {"big [70, 40] float32", {sample_tensor({70, 40}, F32, 306)}},
  };
  o.reference = [](const Stack& a) {
    return std::vector<Tensor>{reduce_reference(
        a[0].to_tensor(), {}, false, [](const ReduceGroup& g) { return g[group_argmax(g)]; })};
  };
  return o;
}

OpSamples max_dim_samples() {
  constexpr DType F32 = DType::Float32, F64 = DType::Float64, I64 = DType::Int64;
  OpSamples o;
  o.op = "mt::max.dim";
  o.samples = {
      {"[3, 4] dim 1", {sample_tensor({3, 4}, F64, 400), int64_t(1)}},
      {"[3, 4] dim 0 keepdim", {sample_tensor({3, 4}, F64, 401), int64_t(0), true}},
      {"[2, 3, 2] dim -1", {sample_tensor({2, 3, 2}, F64, 402), int64_t(-1)}},
      {"0-d dim 0", {sample_tensor({}, F64, 403), int64_t(0)}},
      {"transposed [3, 4] dim 1",
       {sample_view(SampleLayout::Transposed, {3, 4}, F64, 404), int64_t(1)}},
      {"float32 [5] dim 0", {sample_tensor({5}, F32, 405), int64_t(0)}},
      {"int64 [3, 4] dim 1", {sample_tensor({3, 4}, I64, 406, -2, 2), int64_t(1)}, false},
      {"ties [2, 3] dim 1", {from_vector<double>({1, 5, 5, 2, 2, 0}, {2, 3}), int64_t(1)}, false},
      {"big [70, 40] float32 dim 0", {sample_tensor({70, 40}, F32, 407), int64_t(0)}},
  };
  o.reference = [](const Stack& a) {
    const Tensor& x = a[0].to_tensor();
    const ReduceDims dim{a[1].to_int()};
    const bool keepdim = reduce_keepdim_arg(a, 2);
    return std::vector<Tensor>{
        reduce_reference(x, dim, keepdim, [](const ReduceGroup& g) { return g[group_argmax(g)]; }),
        reduce_reference(x, dim, keepdim,
                         [](const ReduceGroup& g) { return double(group_argmax(g)); })};
  };
  return o;
}

OpSamples sum_to_samples() {
  constexpr DType F32 = DType::Float32, F64 = DType::Float64;
  OpSamples o;
  o.op = "mt::sum_to";
  o.samples = {
      {"[3, 4] to [1, 4]", {sample_tensor({3, 4}, F64, 500), ReduceDims{1, 4}}},
      {"[3, 4] to [4]", {sample_tensor({3, 4}, F64, 501), ReduceDims{4}}},
      {"[2, 3, 2] to [3, 1]", {sample_tensor({2, 3, 2}, F64, 502), ReduceDims{3, 1}}},
      {"[3, 4] to [3, 4] (a copy)", {sample_tensor({3, 4}, F64, 503), ReduceDims{3, 4}}},
      {"[2, 3] to []", {sample_tensor({2, 3}, F64, 504), ReduceDims{}}},
      {"0-d to []", {sample_tensor({}, F64, 505), ReduceDims{}}},
      {"expanded [3, 4] to [3, 1]",
       {sample_view(SampleLayout::Expanded, {3, 4}, F64, 506), ReduceDims{3, 1}}},
      {"float32 transposed [3, 4] to [1, 4]",
       {sample_view(SampleLayout::Transposed, {3, 4}, F32, 507), ReduceDims{1, 4}}},
      {"big [70, 40] float32 to [40]",
       {sample_tensor({70, 40}, F32, 508, 0.5, 1.5), ReduceDims{40}}},
  };
  o.reference = [](const Stack& a) {
    return std::vector<Tensor>{sum_to_reference(a[0].to_tensor(), Shape(a[1].to_int_list()))};
  };
  return o;
}

}  // namespace

std::vector<OpSamples> reduce_samples() {
  return {sum_or_mean_samples(false), sum_or_mean_samples(true), max_samples(), max_dim_samples(),
          sum_to_samples()};
}

}  // namespace mt::ops
