// SPDX-License-Identifier: MIT
// rand and randn on the GPU (kernels/cuda_device/random.cu), installed as the runtime's random
// kernel: the draws equal the host's, element by element.
#include "kernels/cuda_host/gpu_kernels.h"
#include "kernels/cuda_host/launch.h"
#include "kernels/cuda_host/names.h"
#include "kernels/jit/builtin.h"

namespace mt::gpu {
namespace {
jit::KernelTable<kNumDTypes * 2> g_random_kernels;
}  // namespace

void random(const Tensor& t, uint64_t seed, uint64_t base, bool normal) {
  detail::check_cuda(t, normal ? "randn" : "rand");
  MT_CHECK(is_floating(t.dtype()) && t.is_contiguous(),
           "[{}] the CUDA kernel fills a contiguous floating tensor, not a {} one",
           normal ? "randn" : "rand", t.dtype());
  long long n = t.numel();
  if (n == 0) return;
  const int dev = t.device().index;
  const jit::Kernel& k = g_random_kernels.get(dev, int(t.dtype()) * 2 + normal, "random.cu", [&] {
    return random_name_expression(t.dtype(), normal);
  });
  void* p = t.data_ptr();
  unsigned long long s = seed, b = base;
  void* args[] = {&p, &n, &s, &b};
  const jit::LaunchShape shape = jit::elementwise_launch_shape(n, jit::sm_count(dev));
  k.launch(shape.grid, shape.block, 0, detail::stream_of(t), args);
}

}  // namespace mt::gpu
