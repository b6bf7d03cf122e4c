// SPDX-License-Identifier: MIT
// softmax and log_softmax on the GPU (softmax.cu, rows along the last dim): another dim
// is moved last by a copy, and the result copied back into out's layout.
#include <fmt/format.h>

#include <algorithm>

#include "kernels/cuda_host/launch.h"
#include "kernels/jit/builtin.h"
#include "kernels/ops/softmax/softmax.h"
#include "runtime/view.h"

namespace mt::gpu {

std::string softmax_name_expression(DType t, bool log) {
  return fmt::format("softmax_rows<{}, {}>", jit::kernel_type_name(t), log ? "true" : "false");
}

namespace {

jit::KernelTable<kNumDTypes * 2> g_softmax_kernels;

void softmax_impl(const Tensor& x_in, int64_t dim, const Tensor& out, bool log) {
  const char* op = log ? "log_softmax" : "softmax";
  detail::check_cuda(x_in, op);
  MT_CHECK(is_floating(out.dtype()), "[{}] needs a floating output, got {}", op, out.dtype());
  if (out.numel() == 0) return;
  const int64_t d = x_in.dim() == 0 ? 0 : wrap_dim(dim, x_in.dim(), op);
  const int64_t last = std::max<int64_t>(x_in.dim() - 1, 0);
  // The rows: x with `dim` last, contiguous, in out's dtype.
  Tensor x = x_in.dim() == 0 ? x_in : mt::detail::transpose_of(x_in, d, last);
  Tensor rows_in = x;
  if (!x.is_contiguous() || x.dtype() != out.dtype()) {
    rows_in = empty(x.sizes(), {.dtype = out.dtype(), .device = x.device()});
    mt::detail::copy_impl(rows_in, x);
  }
  Tensor out_t = x_in.dim() == 0 ? out : mt::detail::transpose_of(out, d, last);
  Tensor rows_out = out_t.is_contiguous()
                        ? out_t
                        : empty(x.sizes(), {.dtype = out.dtype(), .device = x.device()});
  long long n = x_in.dim() == 0 ? 1 : x_in.size(d);
  long long rows = out.numel() / n;
  const int dev = out.device().index;
  const DType t = out.dtype();
  const jit::Kernel& k = g_softmax_kernels.get(dev, int(t) * 2 + log, "softmax.cu",
                                               [&] { return softmax_name_expression(t, log); });
  // A block per row: up to 1024 threads for long rows, a warp's multiple for short ones.
  const unsigned threads = unsigned(std::clamp<int64_t>((n + 31) / 32 * 32, 32, 1024));
  const unsigned blocks = unsigned(std::min<int64_t>(rows, int64_t(jit::sm_count(dev)) * 32));
  const void* px = rows_in.data_ptr();
  void* py = rows_out.data_ptr();
  void* args[] = {&px, &py, &rows, &n};
  k.launch({blocks, 1, 1}, {threads, 1, 1}, 0, detail::stream_of(out), args);
  if (!rows_out.is_same(out_t)) mt::detail::copy_impl(out_t, rows_out);
}

}  // namespace

void softmax(const Tensor& x, int64_t dim, const Tensor& out) { softmax_impl(x, dim, out, false); }
void log_softmax(const Tensor& x, int64_t dim, const Tensor& out) {
  softmax_impl(x, dim, out, true);
}

}  // namespace mt::gpu

namespace mt::ops {

std::vector<jit::EmbeddedKernelFile> softmax_kernel_files() {
  jit::EmbeddedKernelFile soft{"softmax.cu", {}};
  for (DType t : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16})
    for (bool log : {false, true})
      soft.name_expressions.push_back(gpu::softmax_name_expression(t, log));
  return {soft};
}

}  // namespace mt::ops
