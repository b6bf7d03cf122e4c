// SPDX-License-Identifier: MIT
#include "runtime/view.h"

#include <algorithm>

namespace mt::detail {

Shape infer_size(const Shape& shape, int64_t numel, const char* op) {
  Shape out = shape;
  int infer = -1;
  Shape known_sizes;  // shape without its -1
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      MT_CHECK(infer < 0, "[{}] only one dimension can be -1 in shape {}", op, shape);
      infer = int(i);
    } else {
      MT_CHECK(shape[i] >= 0, "[{}] invalid size {} in shape {}", op, shape[i], shape);
      known_sizes.push_back(shape[i]);
    }
  }
  int64_t known = checked_numel(known_sizes, op);  // Note [Checked shapes]
  if (infer >= 0) {
    MT_CHECK(known != 0 && numel % known == 0,
             "[{}] shape {} is invalid for a tensor of {} elements", op, shape, numel);
    out[size_t(infer)] = numel / known;
  } else {
    MT_CHECK(known == numel, "[{}] shape {} is invalid for a tensor of {} elements", op, shape,
             numel);
  }
  return out;
}

bool compute_view_strides(const Shape& sizes, const Shape& strides, const Shape& shape,
                          Shape* out) {
  Shape result(shape.size(), 1);
  int64_t numel = shape_numel(sizes);
  if (numel == 0 || sizes.empty()) {  // empty, or 0-d: any shape of the same numel is a view
    *out = contiguous_strides(shape);
    return true;
  }
  // Walk the old dims from the back in chunks whose dims are contiguous with each other;
  // each chunk must be split exactly by a run of new dims.
  int64_t view_d = int64_t(shape.size()) - 1;
  int64_t chunk_base_stride = sizes.empty() ? 1 : strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = int64_t(sizes.size()) - 1; d >= 0; --d) {
    tensor_numel *= sizes[size_t(d)];
    bool chunk_ends = d == 0 || (sizes[size_t(d - 1)] != 1 &&
                                 strides[size_t(d - 1)] != tensor_numel * chunk_base_stride);
    if (chunk_ends) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[size_t(view_d)] == 1)) {
        result[size_t(view_d)] = view_numel * chunk_base_stride;
        view_numel *= shape[size_t(view_d)];
        --view_d;
      }
      if (view_numel != tensor_numel) return false;
      if (d > 0) {
        chunk_base_stride = strides[size_t(d - 1)];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return false;
  *out = result;
  return true;
}

Tensor view_of(const Tensor& t, const Shape& shape) {
  Shape sizes = infer_size(shape, t.numel(), "view");
  Shape strides;
  MT_CHECK(compute_view_strides(t.sizes(), t.strides(), sizes, &strides),
           "[view] a tensor of shape {} with strides {} cannot be viewed as shape {}: its "
           "elements are not laid out compatibly; use .reshape() (which copies when it must) "
           "or .contiguous().view()",
           t.sizes(), t.strides(), sizes);
  return make_view(t, sizes, strides, t.storage_offset());
}

Tensor transpose_of(const Tensor& t, int64_t dim0, int64_t dim1) {
  int64_t n = t.dim();
  int64_t a = wrap_dim(dim0, n, "transpose"), b = wrap_dim(dim1, n, "transpose");
  Shape sizes = t.sizes(), strides = t.strides();
  if (n == 0) return make_view(t, sizes, strides, t.storage_offset());
  std::swap(sizes[size_t(a)], sizes[size_t(b)]);
  std::swap(strides[size_t(a)], strides[size_t(b)]);
  return make_view(t, sizes, strides, t.storage_offset());
}

Tensor permute_of(const Tensor& t, const Shape& dims) {
  int64_t n = t.dim();
  MT_CHECK(int64_t(dims.size()) == n,
           "[permute] got {} dims {} for a {}-d tensor; give each dimension exactly once",
           dims.size(), dims, n);
  Shape sizes(static_cast<size_t>(n), 0), strides(static_cast<size_t>(n), 0);
  bool seen[kMaxDims] = {};
  for (size_t i = 0; i < size_t(n); ++i) {
    int64_t d = wrap_dim(dims[i], n, "permute");
    MT_CHECK(!seen[d], "[permute] dimension {} appears twice in {}", d, dims);
    seen[d] = true;
    sizes[i] = t.sizes()[size_t(d)];
    strides[i] = t.strides()[size_t(d)];
  }
  return make_view(t, sizes, strides, t.storage_offset());
}

Tensor slice_of(const Tensor& t, int64_t dim, int64_t start, int64_t end, int64_t step) {
  MT_CHECK(t.dim() > 0, "[slice] cannot slice a 0-d tensor");
  int64_t d = wrap_dim(dim, t.dim(), "slice");
  MT_CHECK(step > 0, "[slice] step must be positive, got {}", step);
  int64_t len = t.sizes()[size_t(d)];
  if (start < 0) start += len;
  if (end < 0) end += len;
  start = std::clamp<int64_t>(start, 0, len);
  end = std::clamp<int64_t>(end, start, len);
  Shape sizes = t.sizes(), strides = t.strides();
  // (end - start + step - 1) / step, without overflowing for a huge step
  int64_t n = end > start ? (end - start - 1) / step + 1 : 0;
  sizes[size_t(d)] = n;
  // A dim of 0 or 1 elements never steps, so it keeps the old stride when the product
  // would overflow; with 2 or more the new stride stays inside the storage.
  int64_t stride = 0;
  if (!__builtin_mul_overflow(strides[size_t(d)], step, &stride)) {
    strides[size_t(d)] = stride;
  } else {
    MT_CHECK(n < 2,
             "[slice] step {} times stride {} overflows int64 for a dimension of {} elements", step,
             strides[size_t(d)], n);
  }
  // start == len (an empty slice) can point one stride past the storage's last element
  int64_t offset = 0;
  if (__builtin_mul_overflow(start, t.strides()[size_t(d)], &offset) ||
      __builtin_add_overflow(offset, t.storage_offset(), &offset)) {
    MT_CHECK(n == 0, "[slice] the offset of element {} overflows int64", start);
    offset = t.storage_offset();
  }
  return make_view(t, sizes, strides, offset);
}

Tensor narrow_of(const Tensor& t, int64_t dim, int64_t start, int64_t length) {
  MT_CHECK(t.dim() > 0, "[narrow] cannot narrow a 0-d tensor");
  int64_t d = wrap_dim(dim, t.dim(), "narrow");
  int64_t len = t.sizes()[size_t(d)];
  if (start < 0) start += len;
  MT_CHECK(start >= 0 && start <= len && length >= 0 && length <= len - start,
           "[narrow] start {} and length {} are out of range for dimension {} of size {}", start,
           length, d, len);
  return slice_of(t, d, start, start + length, 1);
}

Tensor select_of(const Tensor& t, int64_t dim, int64_t index) {
  MT_CHECK(t.dim() > 0, "[select] cannot select from a 0-d tensor");
  int64_t d = wrap_dim(dim, t.dim(), "select");
  int64_t len = t.sizes()[size_t(d)];
  MT_CHECK(index >= -len && index < len,
           "[select] index {} is out of range for dimension {} of size {}", index, d, len);
  if (index < 0) index += len;
  Shape sizes = t.sizes(), strides = t.strides();
  int64_t offset = t.storage_offset() + index * strides[size_t(d)];
  sizes.erase(size_t(d));
  strides.erase(size_t(d));
  return make_view(t, sizes, strides, offset);
}

Tensor expand_of(const Tensor& t, const Shape& shape) {
  MT_CHECK(shape.size() >= t.sizes().size(),
           "[expand] cannot expand shape {} to {}: the target has fewer dimensions", t.sizes(),
           shape);
  size_t lead = shape.size() - t.sizes().size();
  Shape sizes(shape.size()), strides(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i < lead) {
      MT_CHECK(shape[i] >= 0,
               "[expand] size {} is not allowed in the new leading dimension {} of {}; sizes "
               "must be >= 0",
               shape[i], i, shape);
      sizes[i] = shape[i];
      strides[i] = 0;
      continue;
    }
    MT_CHECK(shape[i] >= -1,
             "[expand] cannot expand shape {} to {}: size {} in dimension {} is negative; "
             "sizes must be >= 0, or -1 to keep the size",
             t.sizes(), shape, shape[i], i);
    int64_t have = t.sizes()[i - lead];
    int64_t want = shape[i] == -1 ? have : shape[i];
    MT_CHECK(have == want || have == 1,
             "[expand] cannot expand shape {} to {}: dimension {} has size {}, and only size-1 "
             "dimensions can be expanded",
             t.sizes(), shape, i - lead, have);
    sizes[i] = want;
    strides[i] = have == want ? t.strides()[i - lead] : 0;
  }
  // Note [Checked shapes]: an expanded tensor has no storage behind its elements, but its
  // numel and nbytes must still be countable
  checked_nbytes(sizes, checked_numel(sizes, "expand"), t.dtype(), "expand");
  return make_view(t, sizes, strides, t.storage_offset());
}

Tensor squeeze_of(const Tensor& t) {
  Shape sizes, strides;
  for (size_t i = 0; i < t.sizes().size(); ++i) {
    if (t.sizes()[i] == 1) continue;
    sizes.push_back(t.sizes()[i]);
    strides.push_back(t.strides()[i]);
  }
  return make_view(t, sizes, strides, t.storage_offset());
}

Tensor squeeze_of(const Tensor& t, int64_t dim) {
  int64_t d = wrap_dim(dim, t.dim(), "squeeze");
  if (t.dim() == 0 || t.sizes()[size_t(d)] != 1)
    return make_view(t, t.sizes(), t.strides(), t.storage_offset());
  Shape sizes = t.sizes(), strides = t.strides();
  sizes.erase(size_t(d));
  strides.erase(size_t(d));
  return make_view(t, sizes, strides, t.storage_offset());
}

Tensor unsqueeze_of(const Tensor& t, int64_t dim) {
  int64_t d = wrap_dim(dim, t.dim() + 1, "unsqueeze");
  Shape sizes = t.sizes(), strides = t.strides();
  int64_t st = 1;  // any stride works for a size-1 dim; PyTorch's choice when it fits
  if (size_t(d) < sizes.size() && __builtin_mul_overflow(sizes[size_t(d)], strides[size_t(d)], &st))
    st = strides[size_t(d)];
  sizes.insert(size_t(d), 1);
  strides.insert(size_t(d), st);
  return make_view(t, sizes, strides, t.storage_offset());
}

Shape flatten_shape(const Shape& sizes, int64_t start_dim, int64_t end_dim) {
  int64_t n = int64_t(sizes.size());
  if (n == 0) return Shape{1};
  int64_t s = wrap_dim(start_dim, n, "flatten"), e = wrap_dim(end_dim, n, "flatten");
  MT_CHECK(s <= e, "[flatten] start_dim {} comes after end_dim {}", start_dim, end_dim);
  Shape out;
  for (int64_t i = 0; i < s; ++i) out.push_back(sizes[size_t(i)]);
  int64_t m = 1;
  for (int64_t i = s; i <= e; ++i) m *= sizes[size_t(i)];
  out.push_back(m);
  for (int64_t i = e + 1; i < n; ++i) out.push_back(sizes[size_t(i)]);
  return out;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t x = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t y = i < n - b.size() ? 1 : b[i - (n - b.size())];
    MT_CHECK(x == y || x == 1 || y == 1,
             "[{}] shapes {} and {} cannot be broadcast: dimension {} has sizes {} and {}; "
             "sizes must match or one of them must be 1",
             op, a, b, i, x, y);
    out[i] = x == 1 ? y : x;
  }
  return out;
}

}  // namespace mt::detail
