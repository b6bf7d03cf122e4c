// SPDX-License-Identifier: MIT
// SiLU on the GPU: gpu::silu and gpu::silu_backward (the CUDA kernels of mt::silu and
// mt::silu_backward, registered in silu.cpp), their launchers and the name expressions of
// their device code, silu.cu.
#include <fmt/format.h>

#include "kernels/cuda_host/launch.h"
#include "kernels/jit/builtin.h"
#include "kernels/ops/silu/silu.h"
#include "runtime/error.h"

namespace mt::gpu {

std::string silu_name_expression(SiluKernel k, DType t) {
  const std::string_view ty = jit::kernel_type_name(t);
  switch (k) {
    case SiluKernel::Fwd:
      return fmt::format("silu_fwd<{}>", ty);
    case SiluKernel::FwdVec:
      return fmt::format("silu_fwd_vec<{}, {}>", ty, kSiluUnroll);
    case SiluKernel::FwdStrided:
      return fmt::format("silu_fwd_strided<{}>", ty);
    case SiluKernel::Bwd:
      return fmt::format("silu_bwd<{}>", ty);
    case SiluKernel::BwdVec:
      return fmt::format("silu_bwd_vec<{}, {}>", ty, kSiluUnroll);
    case SiluKernel::BwdStrided:
      return fmt::format("silu_bwd_strided<{}>", ty);
  }
  MT_ASSERT(false, "unknown SiluKernel {}", int(k));
  return "";
}

namespace {

constexpr int kNumSiluKernels = 6;
jit::KernelTable<kNumSiluKernels * kNumDTypes> g_silu;

void check_silu_dtype(DType t) {
  MT_CHECK(is_floating(t),
           "[silu] the CUDA kernel takes float32, float64, float16 or bfloat16, not {}; convert "
           "the input with .to(mt::DType::Float32) first",
           t);
}

const jit::Kernel& silu_kernel(int device, SiluKernel k, DType t) {
  return g_silu.get(device, int(k) * kNumDTypes + int(t), "silu.cu",
                    [&] { return silu_name_expression(k, t); });
}

// The grid of the contiguous kernels: the vec kernel's (Note [SiLU's launch shape]) when
// every pointer is 16-byte aligned, else the generic elementwise one.
jit::LaunchShape vec_shape(DType t, int64_t n) {
  const int64_t packs = n / int64_t(16 / dtype_size(t));
  return jit::vec_launch_shape((packs + kSiluUnroll - 1) / kSiluUnroll);
}

}  // namespace

void launch_silu_fwd(int device, CUstream_st* stream, DType t, const void* x, void* y, int64_t n,
                     const StridedLayout* layout) {
  check_silu_dtype(t);
  if (n <= 0) return;
  long long count = n;
  if (layout) {
    StridedLayout l = *layout;
    void* args[] = {&x, &y, &count, &l};
    const auto s = jit::elementwise_launch_shape(n, jit::sm_count(device));
    silu_kernel(device, SiluKernel::FwdStrided, t).launch(s.grid, s.block, 0, stream, args);
  } else if (jit::aligned16({x, y})) {
    void* args[] = {&x, &y, &count};
    const auto s = vec_shape(t, n);
    silu_kernel(device, SiluKernel::FwdVec, t).launch(s.grid, s.block, 0, stream, args);
  } else {
    void* args[] = {&x, &y, &count};
    const auto s = jit::elementwise_launch_shape(n, jit::sm_count(device));
    silu_kernel(device, SiluKernel::Fwd, t).launch(s.grid, s.block, 0, stream, args);
  }
}

void launch_silu_bwd(int device, CUstream_st* stream, DType t, const void* grad, const void* x,
                     void* grad_in, int64_t n, const StridedLayout* layout) {
  check_silu_dtype(t);
  if (n <= 0) return;
  long long count = n;
  if (layout) {
    StridedLayout l = *layout;
    void* args[] = {&grad, &x, &grad_in, &count, &l};
    const auto s = jit::elementwise_launch_shape(n, jit::sm_count(device));
    silu_kernel(device, SiluKernel::BwdStrided, t).launch(s.grid, s.block, 0, stream, args);
  } else if (jit::aligned16({grad, x, grad_in})) {
    void* args[] = {&grad, &x, &grad_in, &count};
    const auto s = vec_shape(t, n);
    silu_kernel(device, SiluKernel::BwdVec, t).launch(s.grid, s.block, 0, stream, args);
  } else {
    void* args[] = {&grad, &x, &grad_in, &count};
    const auto s = jit::elementwise_launch_shape(n, jit::sm_count(device));
    silu_kernel(device, SiluKernel::Bwd, t).launch(s.grid, s.block, 0, stream, args);
  }
}

void silu(const Tensor& x, const Tensor& out) {
  detail::check_cuda(x, "silu");
  const int64_t n = x.numel();
  if (n == 0) return;
  // No DeviceGuard here: Kernel::launch makes the device's context current for the launch
  // (and current_stream for a stream it creates), so a guard here only added a second
  // cuCtxGetCurrent a call.
  const int dev = x.device().index;
  if (x.is_contiguous() && out.is_contiguous()) {
    launch_silu_fwd(dev, detail::stream_of(x), x.dtype(), x.data_ptr(), out.data_ptr(), n);
  } else {
    // The strided kernel reads x in place; operand 0 is the output.
    StridedLayout layout = jit::make_strided_layout(
        detail::span_of(x.sizes()), {detail::span_of(out.strides()), detail::span_of(x.strides())});
    launch_silu_fwd(dev, detail::stream_of(x), x.dtype(), x.data_ptr(), out.data_ptr(), n, &layout);
  }
}

void silu_backward(const Tensor& grad, const Tensor& x, const Tensor& out) {
  detail::check_cuda(x, "silu_backward");
  MT_CHECK(grad.is_cuda() && grad.device() == x.device(),
           "[silu_backward] grad is on {} but x is on {}; they must be on one CUDA device",
           grad.device(), x.device());
  // The kernel reads both in one dtype: grad is converted to x's if they differ.
  Tensor g = detail::converted(grad, x.dtype());
  const int64_t n = x.numel();
  if (n == 0) return;
  // No DeviceGuard here: Kernel::launch makes the device's context current for the launch
  // (and current_stream for a stream it creates), so a guard here only added a second
  // cuCtxGetCurrent a call.
  const int dev = x.device().index;
  if (x.is_contiguous() && g.is_contiguous() && out.is_contiguous()) {
    launch_silu_bwd(dev, detail::stream_of(x), x.dtype(), g.data_ptr(), x.data_ptr(),
                    out.data_ptr(), n);
  } else {
    // Operands: 0 = out, 1 = grad, 2 = x (the launcher's argument order).
    StridedLayout layout = jit::make_strided_layout(
        detail::span_of(x.sizes()), {detail::span_of(out.strides()), detail::span_of(g.strides()),
                                     detail::span_of(x.strides())});
    launch_silu_bwd(dev, detail::stream_of(x), x.dtype(), g.data_ptr(), x.data_ptr(),
                    out.data_ptr(), n, &layout);
  }
}

}  // namespace mt::gpu

namespace mt::ops {

std::vector<jit::EmbeddedKernelFile> silu_kernel_files() {
  jit::EmbeddedKernelFile silu{"silu.cu", {}};
  for (DType t : gpu::kSiluDTypes)
    for (gpu::SiluKernel k :
         {gpu::SiluKernel::Fwd, gpu::SiluKernel::FwdVec, gpu::SiluKernel::FwdStrided,
          gpu::SiluKernel::Bwd, gpu::SiluKernel::BwdVec, gpu::SiluKernel::BwdStrided})
      silu.name_expressions.push_back(gpu::silu_name_expression(k, t));
  return {silu};
}

}  // namespace mt::ops
