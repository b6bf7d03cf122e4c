// SPDX-License-Identifier: MIT
// The metadata of every view, without autograd. The dispatched view ops in
// kernels/ops/views.cpp call these; the Tensor methods go through those ops.
#pragma once

#include "runtime/tensor.h"

namespace mt::detail {

// The strides of `shape` viewed over (sizes, strides), or false if no view exists
// (PyTorch's computeStride: merge runs of dims that are contiguous with each other).
bool compute_view_strides(const Shape& sizes, const Shape& strides, const Shape& shape, Shape* out);
// Resolves one -1 in `shape` against numel; `op` names the caller in errors.
Shape infer_size(const Shape& shape, int64_t numel, const char* op);

Tensor view_of(const Tensor& t, const Shape& shape);  // errors if not viewable
Tensor transpose_of(const Tensor& t, int64_t dim0, int64_t dim1);
Tensor permute_of(const Tensor& t, const Shape& dims);
Tensor slice_of(const Tensor& t, int64_t dim, int64_t start, int64_t end, int64_t step);
Tensor narrow_of(const Tensor& t, int64_t dim, int64_t start, int64_t length);
Tensor select_of(const Tensor& t, int64_t dim, int64_t index);
Tensor expand_of(const Tensor& t, const Shape& shape);
Tensor squeeze_of(const Tensor& t);
Tensor squeeze_of(const Tensor& t, int64_t dim);
Tensor unsqueeze_of(const Tensor& t, int64_t dim);
Shape flatten_shape(const Shape& sizes, int64_t start_dim, int64_t end_dim);
// The shape that broadcasting a and b gives; `op` names the caller in errors.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

}  // namespace mt::detail
