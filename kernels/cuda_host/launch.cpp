// SPDX-License-Identifier: MIT
#include "kernels/cuda_host/launch.h"

#include "runtime/error.h"

#if MT_HAVE_CUDA
#include "runtime/cuda/driver.h"
#endif

namespace mt::gpu::detail {

CUstream_st* stream_of(const Tensor& t) {
#if MT_HAVE_CUDA
  return cuda::current_stream(t.device().index);
#else
  MT_ERROR("[cuda] {} is a CUDA tensor, but this build has no CUDA backend", t.device());
#endif
}

std::vector<int64_t> broadcast_strides(const Tensor& t, const Shape& shape) {
  const size_t n = shape.size(), lead = n - t.sizes().size();
  MT_ASSERT(t.sizes().size() <= n, "cannot broadcast {} to {}", t.sizes(), shape);
  std::vector<int64_t> s(n, 0);
  for (size_t d = lead; d < n; ++d)
    s[d] = t.size(int64_t(d - lead)) == 1 ? 0 : t.stride(int64_t(d - lead));
  return s;
}

Tensor converted(const Tensor& x, DType t) {
  if (x.dtype() == t) return x;
  Tensor c = empty(x.sizes(), {.dtype = t, .device = x.device()});
  mt::detail::copy_impl(c, x);
  return c;
}

void check_cuda(const Tensor& t, const char* op) {
  MT_CHECK(t.is_cuda(),
           "[{}] the CUDA kernel got a tensor on {}; move it with .to(mt::Device(\"cuda\"))", op,
           t.device());
}

}  // namespace mt::gpu::detail
