// SPDX-License-Identifier: MIT
// copy() and fill() for CUDA tensors: what a memcpy or memset can do, plus the hooks
// through which the kernel library adds the rest.
#ifdef MT_HAVE_CUDA

#include <atomic>
#include <cmath>
#include <cstdint>

#include "runtime/cuda/cuda.h"
#include "runtime/cuda/driver.h"
#include "runtime/cuda/hooks.h"
#include "runtime/error.h"
#include "runtime/init.h"
#include "runtime/tensor.h"

namespace mt::cuda {
namespace {

std::atomic<CopyKernel> copy_kernel{nullptr};  // installed by kernels/cuda_host/device_hooks.cpp
std::atomic<FillKernel> fill_kernel{nullptr};
std::atomic<RandomKernel> g_random_kernel{nullptr};

CUdeviceptr device_ptr(const Tensor& t) { return reinterpret_cast<CUdeviceptr>(t.data_ptr()); }

}  // namespace

CopyKernel set_copy_kernel(CopyKernel fn) { return copy_kernel.exchange(fn); }
FillKernel set_fill_kernel(FillKernel fn) { return fill_kernel.exchange(fn); }
RandomKernel set_random_kernel(RandomKernel fn) { return g_random_kernel.exchange(fn); }
RandomKernel random_kernel() {
  if (RandomKernel k = g_random_kernel.load()) return k;
  mt::detail::ensure_initialized();
  return g_random_kernel.load();
}

void copy(const Tensor& dst, const Tensor& src) {
  MT_CHECK(dst.is_cuda() || src.is_cuda(),
           "[cuda::copy] neither tensor is on CUDA ({} and {}); copy CPU tensors with copy_",
           dst.device(), src.device());
  MT_CHECK(dst.sizes() == src.sizes(),
           "[cuda::copy] the shapes differ: dst {} and src {}; expand src first", dst.sizes(),
           src.sizes());
  if (dst.numel() == 0) return;
  if (dst.is_cuda() != src.is_cuda()) {
    // Note [CUDA graph capture]: a copy to the host must wait for the stream, which a
    // capture forbids; a copy from the host would be recorded to read the host memory
    // again at every replay, long after this call returned.
    const int index = dst.is_cuda() ? dst.device().index : src.device().index;
    if (is_capturing(index)) {
      if (dst.is_cuda())
        detail::refuse_during_capture(
            index, "copy from the host",
            "copy the data into a device tensor before capture_begin, and copy from that "
            "tensor inside the capture (a device-to-device copy is recorded)");
      detail::refuse_during_capture(
          index, "copy to the host",
          "it waits for results that do not exist until the graph is replayed; read them "
          "after capture_end and replay (or call .cpu() on the outputs then)");
    }
  }
  const bool plain = dst.dtype() == src.dtype() && dst.is_contiguous() && src.is_contiguous();
  if (dst.is_cuda() && src.is_cuda()) {
    MT_CHECK(dst.device() == src.device(),
             "[cuda::copy] not yet supported: a copy between two devices ({} to {}); copy "
             "through the CPU for now",
             src.device(), dst.device());
    if (!plain) {
      CopyKernel k = copy_kernel.load();
      if (!k) {
        mt::detail::ensure_initialized();
        k = copy_kernel.load();
      }
      MT_CHECK(k,
               "[cuda::copy] not yet supported on {}: a {} copy ({} {} -> {} {}); no "
               "device copy kernel is installed yet",
               dst.device(), dst.dtype() != src.dtype() ? "dtype-converting" : "strided",
               src.dtype(), src.is_contiguous() ? "contiguous" : "strided", dst.dtype(),
               dst.is_contiguous() ? "contiguous" : "strided");
      k(dst, src);
      return;
    }
  } else if (!plain) {
    // Between host and device only contiguous bytes move: stage through a contiguous
    // copy on each side, strided or converting on the device (the copy kernel above) and
    // strided on the host (the host's copy).
    if (dst.is_cuda()) {
      Tensor host = src;
      if (!src.is_contiguous()) {
        host = empty(src.sizes(), {.dtype = src.dtype()});
        mt::detail::copy_impl(host, src);
      }
      Tensor staged = empty(src.sizes(), {.dtype = src.dtype(), .device = dst.device()});
      copy(staged, host);
      copy(dst, staged);
    } else {
      Tensor staged = empty(src.sizes(), {.dtype = dst.dtype(), .device = src.device()});
      copy(staged, src);
      Tensor host = dst.is_contiguous() ? dst : empty(dst.sizes(), {.dtype = dst.dtype()});
      copy(host, staged);
      if (!host.is_same(dst)) mt::detail::copy_impl(dst, host);
    }
    return;
  }
  const int index = dst.is_cuda() ? dst.device().index : src.device().index;
  DeviceGuard guard(index);
  CUstream stream = current_stream(index);
  const size_t n = dst.nbytes();
  if (dst.is_cuda() && src.is_cuda()) {
    MT_CU_CHECK(driver().cuMemcpyDtoDAsync(device_ptr(dst), device_ptr(src), n, stream));
  } else if (dst.is_cuda()) {
    // From pageable memory the driver stages src before returning, so src may go away.
    MT_CU_CHECK(driver().cuMemcpyHtoDAsync(device_ptr(dst), src.data_ptr(), n, stream));
  } else {
    MT_CU_CHECK(driver().cuMemcpyDtoHAsync(dst.data_ptr(), device_ptr(src), n, stream));
    MT_CU_CHECK(driver().cuStreamSynchronize(stream));  // the host reads dst next
  }
}

void fill(const Tensor& t, double value) {
  MT_CHECK(t.is_cuda(), "[cuda::fill] the tensor is on {}, not CUDA", t.device());
  if (t.numel() == 0) return;
  // All-zero bits are 0 in every dtype here (and +0.0, not -0.0, in the float ones).
  if (value == 0 && !std::signbit(value) && t.is_contiguous()) {
    DeviceGuard guard(t.device().index);
    MT_CU_CHECK(
        driver().cuMemsetD8Async(device_ptr(t), 0, t.nbytes(), current_stream(t.device().index)));
    return;
  }
  FillKernel k = fill_kernel.load();
  if (!k) {
    mt::detail::ensure_initialized();
    k = fill_kernel.load();
  }
  MT_CHECK(k,
           "[cuda::fill] not yet supported on {}: filling a {} {} tensor with {}; only a "
           "contiguous fill with zero works until a device fill kernel is installed",
           t.device(), t.is_contiguous() ? "contiguous" : "strided", t.dtype(), value);
  k(t, value);
}

}  // namespace mt::cuda

#endif  // MT_HAVE_CUDA
