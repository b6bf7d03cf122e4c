// The CUDA kernels of mt::silu and mt::silu_backward, and the device copy and fill
// kernels that runtime/cuda/copy.cpp calls for what a memcpy or memset cannot do
// (strided or dtype-converting copies on one device, fills with a non-zero value).
// All of them launch the NVRTC-compiled kernels of kernels/cuda/*.cu through the
// launchers in kernels/jit/builtin.h on the device's current stream.
//
// Registration is harmless on a machine without a GPU: the kernels sit at the CUDA key
// and only CUDA tensors reach them; the hooks are only called by cuda::copy/fill.
#include <cstring>
#include <memory>
#include <span>

#include "dispatcher/library.h"
#include "kernels/gpu/gpu_kernels.h"
#include "kernels/jit/builtin.h"
#include "kernels/ops/registry.h"
#include "runtime/cuda/cuda.h"

#if MT_HAVE_CUDA
#include "runtime/cuda/driver.h"
#endif

namespace mt::ops {
namespace {

std::span<const int64_t> span_of(const Shape& s) { return {s.data(), s.size()}; }

#if MT_HAVE_CUDA

CUstream_st* stream_of(const Tensor& t) { return cuda::current_stream(t.device().index); }

void check_silu_input(const Tensor& x, const char* op) {
  MT_CHECK(x.is_cuda(), "[{}] the CUDA kernel got a tensor on {}", op, x.device());
  check_floating(x, op);
}

Tensor silu_cuda(const Tensor& x) {
  check_silu_input(x, "silu");
  Tensor out = empty_like(x);  // contiguous
  const int64_t n = x.numel();
  if (n == 0) return out;
  const int dev = x.device().index;
  cuda::DeviceGuard guard(dev);
  if (x.is_contiguous()) {
    jit::launch_silu_fwd(dev, stream_of(x), x.dtype(), x.data_ptr(), out.data_ptr(), n);
  } else {
    // The strided kernel reads x in place; operand 0 is the (contiguous) output.
    StridedLayout layout =
        jit::make_strided_layout(span_of(x.sizes()), {span_of(out.strides()), span_of(x.strides())});
    jit::launch_silu_fwd(dev, stream_of(x), x.dtype(), x.data_ptr(), out.data_ptr(), n, &layout);
  }
  return out;
}

Tensor silu_backward_cuda(const Tensor& grad, const Tensor& x_in) {
  MT_CHECK(grad.sizes() == x_in.sizes(),
           "[silu_backward] grad has shape {} but x has shape {}; they must match", grad.sizes(),
           x_in.sizes());
  check_silu_input(x_in, "silu_backward");
  MT_CHECK(grad.is_cuda() && grad.device() == x_in.device(),
           "[silu_backward] grad is on {} but x is on {}; they must be on one CUDA device",
           grad.device(), x_in.device());
  // The kernel reads both in one dtype: convert grad to x's dtype if they differ.
  Tensor g = grad.dtype() == x_in.dtype() ? grad : grad.to(x_in.dtype());
  const Tensor& x = x_in;
  Tensor out = empty_like(x);
  const int64_t n = x.numel();
  if (n == 0) return out;
  const int dev = x.device().index;
  cuda::DeviceGuard guard(dev);
  if (x.is_contiguous() && g.is_contiguous()) {
    jit::launch_silu_bwd(dev, stream_of(x), x.dtype(), g.data_ptr(), x.data_ptr(), out.data_ptr(), n);
  } else {
    // Operands: 0 = out, 1 = grad, 2 = x (the launcher's argument order).
    StridedLayout layout = jit::make_strided_layout(
        span_of(x.sizes()), {span_of(out.strides()), span_of(g.strides()), span_of(x.strides())});
    jit::launch_silu_bwd(dev, stream_of(x), x.dtype(), g.data_ptr(), x.data_ptr(), out.data_ptr(), n,
                         &layout);
  }
  return out;
}

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

#else  // no CUDA headers in this build: nothing can be a CUDA tensor

Tensor silu_cuda(const Tensor&) { MT_CHECK(false, "[silu] this build has no CUDA backend"); return {}; }
Tensor silu_backward_cuda(const Tensor&, const Tensor&) {
  MT_CHECK(false, "[silu_backward] this build has no CUDA backend");
  return {};
}

#endif

}  // namespace

void register_cuda_kernels() {
  Library lib(Library::Kind::Impl, "mt", DispatchKey::CUDA);
  lib.impl("silu", [](const Tensor& x) { return silu_cuda(x); });
  lib.impl("silu_backward", [](const Tensor& g, const Tensor& x) { return silu_backward_cuda(g, x); });
  keep_alive(std::make_shared<Library>(std::move(lib)));
#if MT_HAVE_CUDA
  cuda::set_copy_kernel(&copy_kernel);
  cuda::set_fill_kernel(&fill_kernel);
  cuda::set_random_kernel(&gpu::random);
#endif
}

}  // namespace mt::ops
