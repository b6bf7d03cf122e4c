// The view and copy methods of Tensor, without autograd. Temporary: the dispatched
// forms in kernels/ops/ replace these once the op library lands.
#include "runtime/tensor.h"
#include "runtime/view.h"

namespace mt {

Tensor Tensor::view(const Shape& shape) const { return detail::view_of(*this, shape); }
Tensor Tensor::reshape(const Shape& shape) const {
  Shape sizes = detail::infer_size(shape, numel(), "reshape");
  Shape strides;
  if (detail::compute_view_strides(this->sizes(), this->strides(), sizes, &strides))
    return detail::make_view(*this, sizes, strides, storage_offset());
  return contiguous().view(sizes);
}
Tensor Tensor::transpose(int64_t a, int64_t b) const { return detail::transpose_of(*this, a, b); }
Tensor Tensor::t() const {
  MT_CHECK(dim() <= 2, "[t] expects a tensor with at most 2 dimensions, got {}-d; use transpose",
           dim());
  return dim() < 2 ? *this : transpose(0, 1);
}
Tensor Tensor::permute(const Shape& dims) const { return detail::permute_of(*this, dims); }
Tensor Tensor::narrow(int64_t d, int64_t s, int64_t l) const { return detail::narrow_of(*this, d, s, l); }
Tensor Tensor::slice(int64_t d, int64_t s, int64_t e, int64_t st) const {
  return detail::slice_of(*this, d, s, e, st);
}
Tensor Tensor::select(int64_t d, int64_t i) const { return detail::select_of(*this, d, i); }
Tensor Tensor::expand(const Shape& shape) const { return detail::expand_of(*this, shape); }
Tensor Tensor::squeeze() const { return detail::squeeze_of(*this); }
Tensor Tensor::squeeze(int64_t d) const { return detail::squeeze_of(*this, d); }
Tensor Tensor::unsqueeze(int64_t d) const { return detail::unsqueeze_of(*this, d); }
Tensor Tensor::flatten(int64_t s, int64_t e) const {
  return reshape(detail::flatten_shape(sizes(), s, e));
}

Tensor Tensor::contiguous() const { return is_contiguous() ? *this : clone(); }
Tensor Tensor::clone() const {
  Tensor out = is_fake() ? detail::make_fake(sizes(), contiguous_strides(sizes()), dtype(), device())
                         : empty(sizes(), {.dtype = dtype(), .device = device()});
  if (!is_fake()) detail::copy_impl(out, *this);
  return out;
}
const Tensor& Tensor::copy_(const Tensor& src) const {
  detail::copy_impl(*this, src);
  bump_version();
  return *this;
}
Tensor Tensor::to(DType t) const {
  if (t == dtype()) return *this;
  Tensor out = is_fake() ? detail::make_fake(sizes(), contiguous_strides(sizes()), t, device())
                         : empty(sizes(), {.dtype = t, .device = device()});
  if (!is_fake()) detail::copy_impl(out, *this);
  return out;
}
Tensor Tensor::to(Device d) const {
  if (d == device()) return *this;
  Tensor out = is_fake() ? detail::make_fake(sizes(), contiguous_strides(sizes()), dtype(), d)
                         : empty(sizes(), {.dtype = dtype(), .device = d});
  if (!is_fake()) detail::copy_impl(out, *this);
  return out;
}
const Tensor& Tensor::fill_(double v) const {
  detail::fill_impl(*this, v);
  bump_version();
  return *this;
}
const Tensor& Tensor::zero_() const { return fill_(0); }

}  // namespace mt
