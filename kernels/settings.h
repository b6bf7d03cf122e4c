// SPDX-License-Identifier: MIT
// Process-wide settings of the built-in kernels, part of the public API (minitensor.h).
// The kernels' own headers (kernels/cpu/cpu_kernels.h, kernels/cuda_host/gpu_kernels.h) declare
// the same functions; a translation unit that includes both checks that they agree.
#pragma once

namespace mt::cpu {

// Threads for the CPU kernels, matmul's included (1 to 1024; docs/cpu.md, "Threads"). By
// default MT_NUM_THREADS, else OMP_NUM_THREADS, at most the CPUs this process may run on;
// else those CPUs.
int num_threads();
void set_num_threads(int n);

// Whether matmul calls cblas: built with it and not turned off.
bool have_blas();
void set_use_blas(bool use);  // no effect in a build without cblas

}  // namespace mt::cpu

namespace mt::gpu {

// float32 matmul on CUDA through cuBLAS may use TF32 tensor cores (faster, 10-bit
// mantissa products) when allowed; off by default, as in PyTorch.
void set_allow_tf32(bool allow);
bool allow_tf32();

}  // namespace mt::gpu
