// SPDX-License-Identifier: MIT
// The losses, one folder (kernels/ops/loss/): mt::mse_loss's registration, fake kernel and
// backward (loss.cpp) and the op harness's samples (samples.cpp). It computes with the
// shared kernels below it: cpu::squared_diff and cpu::mean (kernels/cpu/cpu_kernels.h), and
// their gpu:: twins (kernels/cuda_host/gpu_kernels.h).
#pragma once

#include <vector>

#include "kernels/ops/folders.h"

namespace mt::ops {
// The folder's entry points, listed once in kernels/ops/folders.def.
void register_loss();                                      // mt::mse_loss
std::vector<jit::EmbeddedKernelFile> loss_kernel_files();  // none of its own
std::vector<OpSamples> loss_samples();
}  // namespace mt::ops
