// SPDX-License-Identifier: MIT
// The reductions: mt::sum, mean, max (of everything, and max.dim with indices) and
// sum_to, the broadcast-gradient reducer. Shapes, dtypes and backwards here; the loops are
// kernels/cpu's and kernels/cuda_host's (mse_loss's mean runs them too).
#include "kernels/ops/reduce/reduce.h"

#include <algorithm>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cuda_host/gpu_kernels.h"
#include "kernels/ops/registry.h"
#include "runtime/tensor.h"

namespace mt {
namespace ops {
namespace {

// dims wrapped and sorted; a dim listed twice is an error, as in PyTorch.
std::vector<int64_t> normalize_dims(const Tensor& x, std::vector<int64_t> dims, const char* op) {
  for (int64_t& d : dims) d = wrap_dim(d, x.dim(), op);
  std::sort(dims.begin(), dims.end());
  auto dup = std::adjacent_find(dims.begin(), dims.end());
  MT_CHECK(dup == dims.end(), "[{}] dim {} appears more than once in dims; list each dim once", op,
           dup == dims.end() ? 0 : *dup);
  return dims;
}

// Whether dim d of x is reduced (empty dims reduce all of them).
bool is_reduced(const std::vector<int64_t>& dims, int64_t d) {
  return dims.empty() || std::binary_search(dims.begin(), dims.end(), d);
}

Shape reduced_shape(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  Shape out;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (!is_reduced(dims, d))
      out.push_back(x.size(d));
    else if (keepdim)
      out.push_back(1);
  return out;
}

// sum keeps float dtypes and sums integers and bools into int64; mean is float.
Tensor reduce_result(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim, bool mean) {
  DType t = mean ? float_result(x.dtype()) : (is_floating(x.dtype()) ? x.dtype() : DType::Int64);
  return empty(reduced_shape(x, dims, keepdim), {.dtype = t, .device = x.device()});
}

// g (of the reduced shape) broadcast back to x's shape: unsqueeze the removed dims.
Tensor expand_back(const Tensor& g, const Shape& x_sizes, const std::vector<int64_t>& dims,
                   bool keepdim) {
  Tensor r = g;
  if (!keepdim)
    for (int64_t d = 0; d < int64_t(x_sizes.size()); ++d)
      if (is_reduced(dims, d)) r = r.unsqueeze(d);
  return r.expand(x_sizes);
}

void save_reduction(AutogradContext& ctx, const Tensor& x, const std::vector<int64_t>& dims,
                    bool keepdim) {
  ctx.data["sizes"] = x.sizes().vec();
  ctx.data["dims"] = dims;
  ctx.data["keepdim"] = keepdim;
}

// Compute: cpu::sum, cpu::mean, gpu::sum or gpu::mean.
template <bool Mean, auto Compute>
Tensor sum_or_mean(const Tensor& x, const std::vector<int64_t>& dim, bool keepdim) {
  auto dims = normalize_dims(x, dim, Mean ? "mean" : "sum");
  Tensor out = reduce_result(x, dims, keepdim, Mean);
  Compute(x, dims, keepdim, out);
  return out;
}

template <bool Mean>
void register_sum_or_mean(const char* name,
                          std::source_location loc = std::source_location::current()) {
  auto op = custom_op(
      name, sum_or_mean < Mean, Mean ? cpu::mean : cpu::sum >,
      {.mutates_args = {}, .schema = "(Tensor self, int[] dim=[], bool keepdim=False) -> Tensor"},
      loc);
  op.register_kernel(DeviceType::CUDA, sum_or_mean < Mean, Mean ? gpu::mean : gpu::sum >, loc);
  op.register_fake(
      [](const Tensor& x, const std::vector<int64_t>& dim, bool keepdim) {
        return reduce_result(x, normalize_dims(x, dim, Mean ? "mean" : "sum"), keepdim, Mean);
      },
      loc);
  op.register_autograd(
      [](AutogradContext& ctx, const Tensor& g) {
        Shape sizes(std::any_cast<std::vector<int64_t>>(ctx.data["sizes"]));
        auto dims = std::any_cast<std::vector<int64_t>>(ctx.data["dims"]);
        Tensor r = expand_back(g, sizes, dims, std::any_cast<bool>(ctx.data["keepdim"]));
        if (!Mean) return r;
        int64_t n = 1;
        for (int64_t d = 0; d < int64_t(sizes.size()); ++d)
          if (is_reduced(dims, d)) n *= sizes[size_t(d)];
        return div(r, double(n));
      },
      [](AutogradContext& ctx, const Tensor& x, const std::vector<int64_t>& dim, bool keepdim,
         const Tensor&) {
        save_reduction(ctx, x, normalize_dims(x, dim, Mean ? "mean" : "sum"), keepdim);
      },
      loc);
  keep(op);
}

// Note [max backward]
// The gradient goes to the argmax of each reduced group (the first, on ties), as a
// constant 0/1 mask times the broadcast gradient: mul is an op, so the gradient can be
// differentiated again (w.r.t. grad; w.r.t. x it is 0 almost everywhere).

// The 0/1 mask of x's shape with a 1 where `indices` points along `dim`; indices has
// x's shape with dim of size 1 (keepdim form). Under FakeMode, a fake tensor.
Tensor argmax_mask(const Shape& x_sizes, const Tensor& indices, int64_t dim, DType dtype) {
  if (indices.is_fake()) return fake_empty(x_sizes, {.dtype = dtype, .device = indices.device()});
  int64_t outer = 1, inner = 1, n = x_sizes.empty() ? 1 : x_sizes[size_t(dim)];
  for (int64_t d = 0; d < int64_t(x_sizes.size()); ++d) {
    if (d < dim) outer *= x_sizes[size_t(d)];
    if (d > dim) inner *= x_sizes[size_t(d)];
  }
  std::vector<int64_t> at = indices.to_vector<int64_t>();
  std::vector<double> mask(size_t(outer * n * inner), 0.0);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i)
      mask[size_t((o * n + at[size_t(o * inner + i)]) * inner + i)] = 1;
  return from_vector(mask, x_sizes, {.dtype = DType::Float64}).to(dtype).to(indices.device());
}

// max of all elements: a 0-d tensor of x's dtype.
Tensor max_all_result(const Tensor& x) {
  MT_CHECK(x.numel() > 0,
           "[max] the input has no elements (shape {}), and the max of nothing is undefined; "
           "give it at least one element, or use max(x, dim) over a non-empty dim",
           x.sizes());
  return empty({}, {.dtype = x.dtype(), .device = x.device()});
}

std::tuple<Tensor, Tensor> max_dim_result(const Tensor& x, int64_t dim, bool keepdim) {
  int64_t d = wrap_dim(dim, x.dim(), "max");
  MT_CHECK(x.dim() == 0 || x.size(d) > 0,
           "[max] dim {} of the input (shape {}) has size 0, and the max of nothing is "
           "undefined; reduce over a non-empty dim",
           dim, x.sizes());
  Shape s = reduced_shape(x, {d}, keepdim);
  return {empty(s, {.dtype = x.dtype(), .device = x.device()}),
          empty(s, {.dtype = DType::Int64, .device = x.device()})};
}

template <auto Compute>  // cpu::max or gpu::max
Tensor max_all(const Tensor& x) {
  Tensor out = max_all_result(x);
  Compute(x, {}, false, out, Tensor());
  return out;
}

template <auto Compute>
std::tuple<Tensor, Tensor> max_dim(const Tensor& x, int64_t dim, bool keepdim) {
  auto out = max_dim_result(x, dim, keepdim);
  int64_t d = wrap_dim(dim, x.dim(), "max");
  Compute(x, std::vector<int64_t>{d}, keepdim, std::get<0>(out), std::get<1>(out));
  return out;
}

void register_max() {
  auto all = custom_op("mt::max", max_all<cpu::max>,
                       {.mutates_args = {}, .schema = "(Tensor self) -> Tensor"});
  all.register_kernel(DeviceType::CUDA, max_all<gpu::max>);
  all.register_fake(max_all_result);
  all.register_autograd(  // Note [max backward]; the kernel's index is row-major flat
      [](AutogradContext& ctx, const Tensor& g) {
        Tensor x = ctx.saved()[0];
        if (x.is_fake())
          return mul(fake_empty(x.sizes(), {.dtype = g.dtype(), .device = x.device()}), g);
        // The flat index of the max, from max.dim over x flattened (on x's device).
        Tensor index = std::get<1>(max(x.reshape({x.numel()}), 0, false));
        return mul(argmax_mask({x.numel()}, index, 0, g.dtype()).reshape(x.sizes()), g);
      },
      [](AutogradContext& ctx, const Tensor& x, const Tensor&) { ctx.save_for_backward(x); });
  keep(all);

  auto by_dim = custom_op(
      "mt::max.dim", max_dim<cpu::max>,
      {.mutates_args = {},
       .schema = "(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)"});
  by_dim.register_kernel(DeviceType::CUDA, max_dim<gpu::max>);
  by_dim.register_fake(max_dim_result);
  by_dim.register_autograd(  // Note [max backward]
      [](AutogradContext& ctx, const Tensor& g, const Tensor&) {
        Shape sizes(std::any_cast<std::vector<int64_t>>(ctx.data["sizes"]));
        int64_t d = std::any_cast<int64_t>(ctx.data["dim"]);
        bool keepdim = std::any_cast<bool>(ctx.data["keepdim"]);
        Tensor index = ctx.saved()[0];
        Tensor g_kept = g;
        if (!keepdim && !sizes.empty()) {
          index = index.unsqueeze(d);
          g_kept = g.unsqueeze(d);
        }
        return mul(argmax_mask(sizes, index, d, g.dtype()), g_kept);
      },
      [](AutogradContext& ctx, const Tensor& x, int64_t dim, bool keepdim,
         const std::tuple<Tensor, Tensor>& out) {
        ctx.save_for_backward({std::get<1>(out)});
        ctx.data["sizes"] = x.sizes().vec();
        ctx.data["dim"] = wrap_dim(dim, x.dim(), "max");
        ctx.data["keepdim"] = keepdim;
      });
  keep(by_dim);
}

// sum_to: x summed over the dims that broadcasting `size` to x's shape expanded.
Tensor sum_to_result(const Tensor& x, const std::vector<int64_t>& size) {
  Shape shape(size);
  int64_t lead = x.dim() - int64_t(shape.size());
  bool ok = lead >= 0;
  for (int64_t d = 0; ok && d < int64_t(shape.size()); ++d)
    ok = shape[size_t(d)] == 1 || shape[size_t(d)] == x.size(lead + d);
  MT_CHECK(ok,
           "[sum_to] cannot sum a tensor of shape {} to shape {}: the target must broadcast to "
           "it (same sizes or 1, aligned from the right)",
           x.sizes(), shape);
  return empty(shape, {.dtype = x.dtype(), .device = x.device()});
}

template <auto Compute>  // cpu::sum_to or gpu::sum_to
Tensor sum_to_kernel(const Tensor& x, const std::vector<int64_t>& size) {
  Tensor out = sum_to_result(x, size);
  Compute(x, out.sizes(), out);
  return out;
}

void register_sum_to() {
  auto op = custom_op("mt::sum_to", sum_to_kernel<cpu::sum_to>,
                      {.mutates_args = {}, .schema = "(Tensor self, int[] size) -> Tensor"});
  op.register_kernel(DeviceType::CUDA, sum_to_kernel<gpu::sum_to>);
  op.register_fake(sum_to_result);
  op.register_autograd(
      [](AutogradContext& ctx, const Tensor& g) {
        return g.expand(Shape(std::any_cast<std::vector<int64_t>>(ctx.data["sizes"])));
      },
      [](AutogradContext& ctx, const Tensor& x, const std::vector<int64_t>&, const Tensor&) {
        ctx.data["sizes"] = x.sizes().vec();
      });
  keep(op);
}

}  // namespace

void register_reduce() {
  register_sum_or_mean<false>("mt::sum");
  register_sum_or_mean<true>("mt::mean");
  register_max();
  register_sum_to();
}

std::vector<jit::EmbeddedKernelFile> reduce_kernel_files() { return {}; }  // reduce.cu is shared

}  // namespace ops

using ReduceFn = Tensor(const Tensor&, const std::vector<int64_t>&, bool);

Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  MT_BUILTIN_OP("mt::sum", ReduceFn);
  return op(x, dims, keepdim);
}
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  MT_BUILTIN_OP("mt::mean", ReduceFn);
  return op(x, dims, keepdim);
}
Tensor max(const Tensor& x) {
  MT_BUILTIN_OP("mt::max", Tensor(const Tensor&));
  return op(x);
}
std::tuple<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim) {
  using MaxDimFn = std::tuple<Tensor, Tensor>(const Tensor&, int64_t, bool);
  MT_BUILTIN_OP("mt::max.dim", MaxDimFn);
  return op(x, dim, keepdim);
}
Tensor sum_to(const Tensor& x, const Shape& shape) {
  MT_BUILTIN_OP("mt::sum_to", Tensor(const Tensor&, const std::vector<int64_t>&));
  return op(x, shape.vec());
}

}  // namespace mt
