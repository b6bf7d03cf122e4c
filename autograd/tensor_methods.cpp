// SPDX-License-Identifier: MIT
// The Tensor methods that are ops: the views (view, reshape, transpose, permute, slice,
// select, expand, squeeze, unsqueeze and those built on them) and the copies (contiguous,
// clone, copy_, to, fill_). Each calls its op through the dispatcher by name, so that
// autograd, tracing and FakeMode see it like any other op; the ops themselves (schemas,
// kernels, gradients) are registered by kernels/ops/views.cpp and kernels/ops/copy.cpp.
//
// Note [Where the op-backed Tensor methods live]
// They need only the dispatcher, and autograd calls them (the engine's .grad accumulation,
// gradcheck, opcheck), so they are defined here, in the autograd layer, rather than beside
// their ops in kernels/: no object of a layer then needs a symbol that only a layer above
// it defines (tools/lint/check_layers.py --link). The runtime, below the dispatcher, calls none
// of them: its factories, printing and to_vector copy through detail::copy_as and
// detail::host_contiguous (runtime/copy.cpp), which are not ops.
#include "dispatcher/dispatcher.h"
#include "runtime/tensor.h"
#include "runtime/view.h"

// A typed handle to the op, looked up once per method (the first call initializes the
// library, which registers the built-in ops: Note [Library initialization]).
#define MT_TENSOR_OP(name, Sig) \
  static const auto op = ::mt::dispatcher().find_or_throw(name).typed<Sig>()

namespace mt {
namespace {
using ShapeOp = Tensor(const Tensor&, const std::vector<int64_t>&);
}  // namespace

// ---- views -----------------------------------------------------------------------------

Tensor Tensor::view(const Shape& shape) const {
  MT_TENSOR_OP("mt::view", ShapeOp);
  return op(*this, shape.vec());
}
Tensor Tensor::reshape(const Shape& shape) const {
  MT_TENSOR_OP("mt::reshape", ShapeOp);
  return op(*this, shape.vec());
}
Tensor Tensor::permute(const Shape& dims) const {
  MT_TENSOR_OP("mt::permute", ShapeOp);
  return op(*this, dims.vec());
}
Tensor Tensor::expand(const Shape& shape) const {
  MT_TENSOR_OP("mt::expand", ShapeOp);
  return op(*this, shape.vec());
}
Tensor Tensor::transpose(int64_t a, int64_t b) const {
  MT_TENSOR_OP("mt::transpose", Tensor(const Tensor&, int64_t, int64_t));
  return op(*this, a, b);
}
Tensor Tensor::t() const {
  MT_CHECK(dim() <= 2, "[t] expects a tensor with at most 2 dimensions, got {}-d; use transpose",
           dim());
  return dim() < 2 ? *this : transpose(0, 1);
}
Tensor Tensor::slice(int64_t d, int64_t s, int64_t e, int64_t st) const {
  MT_TENSOR_OP("mt::slice", Tensor(const Tensor&, int64_t, int64_t, int64_t, int64_t));
  return op(*this, d, s, e, st);
}
Tensor Tensor::narrow(int64_t d, int64_t s, int64_t l) const {
  Tensor checked = detail::narrow_of(*this, d, s, l);  // validates start and length
  (void)checked;
  int64_t dim = wrap_dim(d, this->dim(), "narrow");
  if (s < 0) s += sizes()[size_t(dim)];
  return slice(dim, s, s + l, 1);
}
Tensor Tensor::select(int64_t d, int64_t i) const {
  MT_TENSOR_OP("mt::select", Tensor(const Tensor&, int64_t, int64_t));
  return op(*this, d, i);
}
Tensor Tensor::squeeze() const {
  MT_TENSOR_OP("mt::squeeze", Tensor(const Tensor&));
  return op(*this);
}
Tensor Tensor::squeeze(int64_t d) const {
  MT_TENSOR_OP("mt::squeeze.dim", Tensor(const Tensor&, int64_t));
  return op(*this, d);
}
Tensor Tensor::unsqueeze(int64_t d) const {
  MT_TENSOR_OP("mt::unsqueeze", Tensor(const Tensor&, int64_t));
  return op(*this, d);
}
Tensor Tensor::flatten(int64_t s, int64_t e) const {
  return reshape(detail::flatten_shape(sizes(), s, e));
}

// ---- copies ----------------------------------------------------------------------------

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  MT_TENSOR_OP("mt::contiguous", Tensor(const Tensor&));
  return op(*this);
}
Tensor Tensor::clone() const {
  MT_TENSOR_OP("mt::clone", Tensor(const Tensor&));
  return op(*this);
}
const Tensor& Tensor::copy_(const Tensor& src) const {
  MT_TENSOR_OP("mt::copy_", Tensor(const Tensor&, const Tensor&));
  op(*this, src);
  return *this;
}
Tensor Tensor::to(DType t) const {
  if (t == dtype()) return *this;
  MT_TENSOR_OP("mt::to.dtype", Tensor(const Tensor&, DType));
  return op(*this, t);
}
Tensor Tensor::to(Device d) const {
  if (d == device()) return *this;
  MT_TENSOR_OP("mt::to.device", Tensor(const Tensor&, Device));
  return op(*this, d);
}
const Tensor& Tensor::fill_(double v) const {
  MT_TENSOR_OP("mt::fill_", Tensor(const Tensor&, double));
  op(*this, v);
  return *this;
}
const Tensor& Tensor::zero_() const { return fill_(0); }

}  // namespace mt
