// SPDX-License-Identifier: MIT
// mt::matmul, one folder (kernels/ops/matmul/): its registration, fake kernel and backward
// (matmul.cpp) and the op harness's samples (samples.cpp). The products it calls stay in the
// sub-layers below: cpu::matmul (kernels/cpu/cpu_kernels.h: BLAS or the library's packed
// GEMM, also timed by the benchmarks, its choice reported by `minitensor doctor`) and
// gpu::matmul (kernels/cuda_host/gpu_kernels.h: cuBLAS, which cuda_host loads at run time).
#pragma once

#include <vector>

#include "kernels/ops/folders.h"

namespace mt::ops {
// The folder's entry points, listed once in kernels/ops/folders.def.
void register_matmul();                                      // mt::matmul
std::vector<jit::EmbeddedKernelFile> matmul_kernel_files();  // none: cuBLAS runs it on CUDA
std::vector<OpSamples> matmul_samples();
}  // namespace mt::ops
