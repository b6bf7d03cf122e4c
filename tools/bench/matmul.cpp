// SPDX-License-Identifier: MIT
#include "tools/bench/matmul.h"

#include <fmt/format.h>

#include <cmath>

#include "kernels/cpu/cpu_kernels.h"

namespace mt::bench {

std::vector<MatmulRow> matmul_cpu_sweep(const std::vector<int64_t>& sizes,
                                        const std::vector<int>& threads, bool with_copy,
                                        Progress& progress, double min_seconds) {
  std::vector<MatmulRow> rows;
  for (int64_t s : sizes) {
    Tensor a = rand({s, s}), b = rand({s, s}), c = empty({s, s});
    const int64_t copy_bytes = 3 * s * s * 4 / 2;  // a copy reads and writes: 12 s^2 bytes moved
    std::vector<char> src(with_copy ? size_t(copy_bytes) : 0, 1), dst(src.size(), 0);
    for (bool blas : {true, false}) {  // cblas even where matmul would not pick it
      cpu::set_matmul_kernel(blas ? cpu::MatmulKernel::Blas : cpu::MatmulKernel::Own);
      if (blas && !cpu::have_blas()) continue;  // a build without cblas
      for (int t : threads) {
        progress.step(fmt::format("{} {} thread(s), {}x{}", blas ? "blas" : "own", t, s, s));
        cpu::set_num_threads(t);
        double sec = cpu_median_seconds([&] { cpu::matmul(a, b, c); }, 5, min_seconds);
        double copy = with_copy ? cpu_median_seconds(
                                      [&] { parallel_copy(dst.data(), src.data(), copy_bytes); }, 5,
                                      min_seconds)
                                : std::nan("");
        rows.push_back(
            {s, blas ? "blas" : "own", t, sec, 2.0 * double(s * s * s) / sec / 1e9, copy});
      }
    }
  }
  cpu::set_matmul_kernel(cpu::MatmulKernel::Auto);
  return rows;
}

std::vector<MatmulRow> matmul_cuda_sweep(int device, const std::vector<int64_t>& sizes,
                                         const CudaTiming& timing, Progress& progress) {
  const Device gpu(DeviceType::CUDA, device);
  check_device(gpu, "bench matmul");
  CudaTiming no_flush = timing;
  no_flush.flush_l2 = false;  // compute-bound at the sizes that matter
  std::vector<MatmulRow> rows;
  for (int64_t s : sizes) {
    progress.step(fmt::format("mt::matmul {}x{}", s, s));
    Tensor a = rand({s, s}).to(gpu), b = rand({s, s}).to(gpu);
    double ms = cuda_median_ms(device, no_flush, [&] { Tensor c = matmul(a, b); });
    Tensor src = empty({3 * s * s / 2}, {.device = gpu}), dst = empty_like(src);
    double copy_ms = cuda_median_ms(device, timing, [&] { dst.copy_(src); });
    rows.push_back(
        {s, "mt::matmul", 0, ms / 1e3, 2.0 * double(s * s * s) / (ms / 1e3) / 1e9, copy_ms / 1e3});
  }
  return rows;
}

}  // namespace mt::bench
