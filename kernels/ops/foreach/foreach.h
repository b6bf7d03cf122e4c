// SPDX-License-Identifier: MIT
// The foreach ops, one folder (kernels/ops/foreach/): mt::foreach_add_'s registration, checks
// and fake kernel (foreach.cpp) and the op harness's samples (samples.cpp). It computes with
// the shared kernels below it: cpu::binary (kernels/cpu/cpu_kernels.h) and the multi-tensor
// launch gpu::foreach_binary_ (kernels/cuda_host/gpu_kernels.h).
#pragma once

#include <vector>

#include "kernels/ops/folders.h"

namespace mt::ops {
// The folder's entry points, listed once in kernels/ops/folders.def.
void register_foreach();                                      // mt::foreach_add_
std::vector<jit::EmbeddedKernelFile> foreach_kernel_files();  // none: elementwise.cu's
std::vector<OpSamples> foreach_samples();
}  // namespace mt::ops
