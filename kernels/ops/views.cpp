// SPDX-License-Identifier: MIT
// The view ops (view, reshape, transpose, permute, slice, select, expand, squeeze,
// unsqueeze). A view is metadata only, so one function serves CPU, CUDA and Fake; autograd
// maps the gradient back through it. The Tensor methods that call these ops are in
// autograd/tensor_methods.cpp (Note [Where the op-backed Tensor methods live]).
#include "kernels/ops/registry.h"
#include "runtime/view.h"

namespace mt {
namespace ops {
namespace {

std::vector<int64_t> vec(const Shape& s) { return s.vec(); }

Shape shape_of(AutogradContext& ctx) {
  return Shape(std::any_cast<std::vector<int64_t>>(ctx.data["sizes"]));
}
void save_sizes(AutogradContext& ctx, const Tensor& x) { ctx.data["sizes"] = vec(x.sizes()); }

Tensor reshape_impl(const Tensor& x, const std::vector<int64_t>& shape) {
  Shape sizes = detail::infer_size(Shape(shape), x.numel(), "reshape");
  Shape strides;
  if (detail::compute_view_strides(x.sizes(), x.strides(), sizes, &strides))
    return detail::make_view(x, sizes, strides, x.storage_offset());
  return detail::view_of(x.contiguous(), sizes);
}

// Backward and setup_context of the views whose gradient is the input's shape back.
constexpr auto reshape_back = [](AutogradContext& ctx, const Tensor& g) {
  return g.reshape(shape_of(ctx));
};
constexpr auto keep_sizes = [](AutogradContext& ctx, const Tensor& x, auto&&...) {
  save_sizes(ctx, x);
};

// view, reshape, squeeze, unsqueeze: the gradient is reshaped back to the input's shape.
void register_reshapes() {
  register_everywhere(
      "mt::view", "(Tensor(a) self, int[] size) -> Tensor(a)",
      [](const Tensor& x, const std::vector<int64_t>& size) {
        return detail::view_of(x, Shape(size));
      },
      reshape_back, keep_sizes);
  register_everywhere("mt::reshape", "(Tensor(a) self, int[] shape) -> Tensor(a)", reshape_impl,
                      reshape_back, keep_sizes);
  register_everywhere(
      "mt::squeeze", "(Tensor(a) self) -> Tensor(a)",
      [](const Tensor& x) { return detail::squeeze_of(x); }, reshape_back, keep_sizes);
  register_everywhere(
      "mt::squeeze.dim", "(Tensor(a) self, int dim) -> Tensor(a)",
      [](const Tensor& x, int64_t d) { return detail::squeeze_of(x, d); }, reshape_back,
      keep_sizes);
  register_everywhere(
      "mt::unsqueeze", "(Tensor(a) self, int dim) -> Tensor(a)",
      [](const Tensor& x, int64_t d) { return detail::unsqueeze_of(x, d); }, reshape_back,
      keep_sizes);
}

// transpose, permute: the gradient goes through the inverse permutation.
void register_permutes() {
  register_everywhere(
      "mt::transpose", "(Tensor(a) self, int dim0, int dim1) -> Tensor(a)",
      [](const Tensor& x, int64_t a, int64_t b) { return detail::transpose_of(x, a, b); },
      [](AutogradContext& ctx, const Tensor& g) {
        return g.transpose(std::any_cast<int64_t>(ctx.data["dim0"]),
                           std::any_cast<int64_t>(ctx.data["dim1"]));
      },
      [](AutogradContext& ctx, const Tensor&, int64_t a, int64_t b, const Tensor&) {
        ctx.data["dim0"] = a;
        ctx.data["dim1"] = b;
      });

  register_everywhere(
      "mt::permute", "(Tensor(a) self, int[] dims) -> Tensor(a)",
      [](const Tensor& x, const std::vector<int64_t>& dims) {
        return detail::permute_of(x, Shape(dims));
      },
      [](AutogradContext& ctx, const Tensor& g) {
        auto dims = std::any_cast<std::vector<int64_t>>(ctx.data["dims"]);
        Shape inverse(dims.size());
        for (size_t i = 0; i < dims.size(); ++i)
          inverse[size_t(wrap_dim(dims[i], int64_t(dims.size()), "permute"))] = int64_t(i);
        return g.permute(inverse);
      },
      [](AutogradContext& ctx, const Tensor&, const std::vector<int64_t>& dims, const Tensor&) {
        ctx.data["dims"] = dims;
      });
}

// expand, slice, select: the gradient is summed or written back into the input's shape.
void register_expand_slice_select() {
  register_everywhere(
      "mt::expand", "(Tensor(a) self, int[] size) -> Tensor(a)",
      [](const Tensor& x, const std::vector<int64_t>& size) {
        return detail::expand_of(x, Shape(size));
      },
      [](AutogradContext& ctx, const Tensor& g) { return sum_to(g, shape_of(ctx)); }, keep_sizes);

  register_everywhere(
      "mt::slice", "(Tensor(a) self, int dim, int start, int end, int step=1) -> Tensor(a)",
      [](const Tensor& x, int64_t d, int64_t s, int64_t e, int64_t st) {
        return detail::slice_of(x, d, s, e, st);
      },
      [](AutogradContext& ctx, const Tensor& g) {
        return slice_backward(g, shape_of(ctx).vec(), std::any_cast<int64_t>(ctx.data["dim"]),
                              std::any_cast<int64_t>(ctx.data["start"]),
                              std::any_cast<int64_t>(ctx.data["end"]),
                              std::any_cast<int64_t>(ctx.data["step"]));
      },
      [](AutogradContext& ctx, const Tensor& x, int64_t d, int64_t s, int64_t e, int64_t st,
         const Tensor&) {
        save_sizes(ctx, x);
        ctx.data["dim"] = d;
        ctx.data["start"] = s;
        ctx.data["end"] = e;
        ctx.data["step"] = st;
      });

  register_everywhere(
      "mt::select", "(Tensor(a) self, int dim, int index) -> Tensor(a)",
      [](const Tensor& x, int64_t d, int64_t i) { return detail::select_of(x, d, i); },
      [](AutogradContext& ctx, const Tensor& g) {
        return select_backward(g, shape_of(ctx).vec(), std::any_cast<int64_t>(ctx.data["dim"]),
                               std::any_cast<int64_t>(ctx.data["index"]));
      },
      [](AutogradContext& ctx, const Tensor& x, int64_t d, int64_t i, const Tensor&) {
        save_sizes(ctx, x);
        ctx.data["dim"] = d;
        ctx.data["index"] = i;
      });
}

// The gradients of slice and select: the gradient written into zeros of the input's
// shape. Ops of their own, so that their own gradient (slice/select again) is known.
void register_slice_select_backward() {
  auto slice_bwd = [](const Tensor& g, const std::vector<int64_t>& sizes, int64_t d, int64_t s,
                      int64_t e, int64_t st) {
    Tensor gi = zeros(Shape(sizes), {.dtype = g.dtype(), .device = g.device()});
    if (!gi.is_fake()) detail::copy_impl(detail::slice_of(gi, d, s, e, st), g);
    return gi;
  };
  register_everywhere(
      "mt::slice_backward",
      "(Tensor grad_output, int[] input_sizes, int dim, int start, int end, int step) -> Tensor",
      slice_bwd,
      [](AutogradContext& ctx, const Tensor& gg) {
        return gg.slice(
            std::any_cast<int64_t>(ctx.data["dim"]), std::any_cast<int64_t>(ctx.data["start"]),
            std::any_cast<int64_t>(ctx.data["end"]), std::any_cast<int64_t>(ctx.data["step"]));
      },
      [](AutogradContext& ctx, const Tensor&, const std::vector<int64_t>&, int64_t d, int64_t s,
         int64_t e, int64_t st, const Tensor&) {
        ctx.data["dim"] = d;
        ctx.data["start"] = s;
        ctx.data["end"] = e;
        ctx.data["step"] = st;
      });
  auto select_bwd = [](const Tensor& g, const std::vector<int64_t>& sizes, int64_t d, int64_t i) {
    Tensor gi = zeros(Shape(sizes), {.dtype = g.dtype(), .device = g.device()});
    if (!gi.is_fake()) detail::copy_impl(detail::select_of(gi, d, i), g);
    return gi;
  };
  register_everywhere(
      "mt::select_backward",
      "(Tensor grad_output, int[] input_sizes, int dim, int index) -> Tensor", select_bwd,
      [](AutogradContext& ctx, const Tensor& gg) {
        return gg.select(std::any_cast<int64_t>(ctx.data["dim"]),
                         std::any_cast<int64_t>(ctx.data["index"]));
      },
      [](AutogradContext& ctx, const Tensor&, const std::vector<int64_t>&, int64_t d, int64_t i,
         const Tensor&) {
        ctx.data["dim"] = d;
        ctx.data["index"] = i;
      });
}

}  // namespace

void register_views() {
  register_reshapes();
  register_permutes();
  register_expand_slice_select();
  register_slice_select_backward();
}

}  // namespace ops

Tensor slice_backward(const Tensor& grad, const std::vector<int64_t>& input_sizes, int64_t dim,
                      int64_t start, int64_t end, int64_t step) {
  MT_BUILTIN_OP("mt::slice_backward", Tensor(const Tensor&, const std::vector<int64_t>&, int64_t,
                                             int64_t, int64_t, int64_t));
  return op(grad, input_sizes, dim, start, end, step);
}
Tensor select_backward(const Tensor& grad, const std::vector<int64_t>& input_sizes, int64_t dim,
                       int64_t index) {
  MT_BUILTIN_OP("mt::select_backward",
                Tensor(const Tensor&, const std::vector<int64_t>&, int64_t, int64_t));
  return op(grad, input_sizes, dim, index);
}

}  // namespace mt
