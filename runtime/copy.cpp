// SPDX-License-Identifier: MIT
// copy_ and fill_ on the host, any layout and dtype; CUDA copies go to runtime/cuda.
#include <cstring>

#include "runtime/cuda/cuda.h"
#include "runtime/cuda/hooks.h"
#include "runtime/tensor.h"
#include "runtime/view.h"

namespace mt::detail {
namespace {

// Calls f(dst_offset, src_offset) for every element, in row-major order of `sizes`.
template <typename F>
void for_each_pair(const Shape& sizes, const Shape& dst_strides, const Shape& src_strides, F&& f) {
  int64_t n = shape_numel(sizes);
  if (n == 0) return;
  size_t nd = sizes.size();
  if (nd == 0) return f(int64_t(0), int64_t(0));
  int64_t idx[kMaxDims] = {};
  int64_t od = 0, os = 0;
  int64_t inner = sizes[nd - 1], ds = dst_strides[nd - 1], ss = src_strides[nd - 1];
  for (int64_t done = 0; done < n; done += inner) {
    for (int64_t i = 0; i < inner; ++i) f(od + i * ds, os + i * ss);
    for (size_t d = nd - 1; d-- > 0;) {  // advance the outer counter
      if (++idx[d] < sizes[d]) {
        od += dst_strides[d];
        os += src_strides[d];
        break;
      }
      od -= (sizes[d] - 1) * dst_strides[d];
      os -= (sizes[d] - 1) * src_strides[d];
      idx[d] = 0;
    }
  }
}

template <typename D, typename S>
D convert(S v) {
  if constexpr (std::is_same_v<S, Half> || std::is_same_v<S, BFloat16>) {
    return convert<D>(float(v));
  } else if constexpr (std::is_same_v<D, bool>) {
    return v != S(0);
  } else if constexpr (std::is_same_v<D, Half> || std::is_same_v<D, BFloat16>) {
    return D(float(v));
  } else if constexpr (std::is_same_v<D, int64_t> && std::is_floating_point_v<S>) {
    return saturate_to_int64(v);  // Note [Float to integer conversion]
  } else {
    return D(v);
  }
}

}  // namespace

void copy_impl(const Tensor& dst, const Tensor& src) {
  MT_CHECK(!dst.is_fake() && !src.is_fake(),
           "[copy_] cannot copy data to or from a fake tensor; fake tensors carry only metadata");
  Tensor s = src;
  if (src.sizes() != dst.sizes()) {
    Shape b = broadcast_shapes(dst.sizes(), src.sizes(), "copy_");
    MT_CHECK(b == dst.sizes(),
             "[copy_] cannot copy a tensor of shape {} into one of shape {}: the source must "
             "have the destination's shape or broadcast to it",
             src.sizes(), dst.sizes());
    s = expand_of(src, dst.sizes());
  }
  if (dst.numel() == 0) return;
  if (dst.is_cuda() || s.is_cuda()) return cuda::copy(dst, s);
  if (dst.dtype() == s.dtype() && dst.is_contiguous() && s.is_contiguous()) {
    if (dst.data_ptr() != s.data_ptr()) std::memmove(dst.data_ptr(), s.data_ptr(), dst.nbytes());
    return;
  }
  visit_dtype(dst.dtype(), [&](auto dtag) {
    using D = decltype(dtag);
    visit_dtype(s.dtype(), [&](auto stag) {
      using S = decltype(stag);
      D* d = static_cast<D*>(dst.data_ptr());
      const S* p = static_cast<const S*>(s.data_ptr());
      for_each_pair(dst.sizes(), dst.strides(), s.strides(),
                    [&](int64_t od, int64_t os) { d[od] = convert<D>(p[os]); });
    });
  });
}

void fill_impl(const Tensor& t, double value) {
  MT_CHECK(!t.is_fake(), "[fill_] cannot fill a fake tensor; fake tensors carry only metadata");
  if (t.numel() == 0) return;
  if (t.is_cuda()) return cuda::fill(t, value);
  visit_dtype(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T v = convert<T>(value);
    T* d = static_cast<T*>(t.data_ptr());
    if (t.is_contiguous()) {
      std::fill(d, d + t.numel(), v);
      return;
    }
    for_each_pair(t.sizes(), t.strides(), t.strides(), [&](int64_t o, int64_t) { d[o] = v; });
  });
}

Tensor copy_as(const Tensor& t, DType dtype, Device device) {
  Tensor out = empty(t.sizes(), {.dtype = dtype, .device = device});  // fake under FakeMode
  if (!out.is_fake()) copy_impl(out, t);
  return out;
}

Tensor host_contiguous(const Tensor& t, DType dtype) {
  if (t.is_fake()) (void)t.data_ptr();  // throws: a fake tensor has no values to read
  Tensor c = t.is_cpu() ? t : copy_as(t, t.dtype(), kCPU);  // the device's own dtype first
  if (c.dtype() != dtype || !c.is_contiguous()) c = copy_as(c, dtype, kCPU);
  return c;
}

double read_as_double(const Tensor& t, int64_t i) {
  int64_t off = 0, rem = i;
  for (size_t d = t.sizes().size(); d-- > 0;) {
    off += (rem % t.sizes()[d]) * t.strides()[d];
    rem /= t.sizes()[d];
  }
  return visit_dtype(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    return convert<double>(static_cast<const T*>(t.data_ptr())[off]);
  });
}

}  // namespace mt::detail
