// SPDX-License-Identifier: MIT
// The public settings of kernels/ops.h, forwarded to the CPU kernels (mt::cpu) and the GPU
// launchers (mt::gpu), whose own namespaces are not installed.
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cuda_host/gpu_kernels.h"
#include "kernels/ops.h"

namespace mt {

int num_threads() { return cpu::num_threads(); }
void set_num_threads(int n) { cpu::set_num_threads(n); }
bool have_blas() { return cpu::have_blas(); }
void set_use_blas(bool use) { cpu::set_use_blas(use); }

}  // namespace mt

namespace mt::cuda {

void set_allow_tf32(bool allow) { gpu::set_allow_tf32(allow); }
bool allow_tf32() { return gpu::allow_tf32(); }

}  // namespace mt::cuda
