// SPDX-License-Identifier: MIT
// The runtime's device hooks: the kernels cuda::copy, cuda::fill and the CUDA rand/randn
// call for what a memcpy or memset cannot do (strided or dtype-converting copies on one
// device, fills with a non-zero value, random draws). They launch the NVRTC-compiled
// kernels of kernels/cuda_device/copy.cu and random.cu on the device's current stream, and are
// installed once by the library's initialization (Note [Library initialization]).
#include <cstring>
#include <type_traits>

#include "kernels/cuda_host/gpu_kernels.h"
#include "kernels/cuda_host/launch.h"
#include "kernels/jit/builtin.h"

#if MT_HAVE_CUDA
#include "runtime/cuda/driver.h"
#include "runtime/cuda/hooks.h"
#endif

namespace mt::gpu {

#if MT_HAVE_CUDA
namespace {

using detail::span_of;
using detail::stream_of;

// cuda::copy's kernel: dst and src on one CUDA device, same shape, strided and/or of
// different dtypes.
void copy_kernel(const Tensor& dst, const Tensor& src) {
  const int64_t n = dst.numel();
  if (n == 0) return;
  const int dev = dst.device().index;
  cuda::DeviceGuard guard(dev);
  if (dst.is_contiguous() && src.is_contiguous()) {
    jit::launch_copy_cast(dev, stream_of(dst), dst.dtype(), dst.data_ptr(), src.dtype(),
                          src.data_ptr(), n);
  } else {
    StridedLayout layout = jit::make_strided_layout(
        span_of(dst.sizes()), {span_of(dst.strides()), span_of(src.strides())});
    jit::launch_copy_cast(dev, stream_of(dst), dst.dtype(), dst.data_ptr(), src.dtype(),
                          src.data_ptr(), n, &layout);
  }
}

// cuda::fill's kernel: one value converted to t's dtype on the host, written on the device.
void fill_kernel(const Tensor& t, double value) {
  const int64_t n = t.numel();
  if (n == 0) return;
  const int dev = t.device().index;
  cuda::DeviceGuard guard(dev);
  alignas(8) unsigned char bits[8] = {};
  visit_dtype(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T v;
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      v = T(float(value));
    } else if constexpr (std::is_same_v<T, bool>) {
      v = value != 0;
    } else {
      v = static_cast<T>(value);
    }
    std::memcpy(bits, &v, sizeof(T));
  });
  if (t.is_contiguous()) {
    jit::launch_fill(dev, stream_of(t), t.dtype(), t.data_ptr(), n, bits);
  } else {
    StridedLayout layout = jit::make_strided_layout(span_of(t.sizes()), {span_of(t.strides())});
    jit::launch_fill(dev, stream_of(t), t.dtype(), t.data_ptr(), n, bits, &layout);
  }
}

}  // namespace
#endif

void install_device_hooks() {
#if MT_HAVE_CUDA  // else nothing can be a CUDA tensor, and runtime/cuda/copy.cpp is empty
  cuda::set_copy_kernel(&copy_kernel);
  cuda::set_fill_kernel(&fill_kernel);
  cuda::set_random_kernel(&gpu::random);
#endif
}

}  // namespace mt::gpu
