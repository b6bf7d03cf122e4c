// SPDX-License-Identifier: MIT
// mt::sum, mt::mean, mt::max, mt::max.dim and mt::sum_to, one folder (kernels/ops/reduce/):
// their registration, fake kernels and backwards (reduce.cpp) and the op harness's samples
// (samples.cpp). Their CPU and CUDA loops are shared (mt::mse_loss takes a mean with them):
// cpu::sum/mean/max/sum_to in kernels/cpu/cpu_kernels.h, gpu:: in
// kernels/cuda_host/gpu_kernels.h, device code kernels/cuda_device/reduce.cu.
#pragma once

#include <vector>

#include "kernels/ops/folders.h"

namespace mt::ops {
// The folder's entry points, listed once in kernels/ops/folders.def.
void register_reduce();                                      // mt::sum, mean, max, max.dim, sum_to
std::vector<jit::EmbeddedKernelFile> reduce_kernel_files();  // none: reduce.cu is shared
std::vector<OpSamples> reduce_samples();
}  // namespace mt::ops
