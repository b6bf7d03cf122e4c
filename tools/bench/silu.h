// SPDX-License-Identifier: MIT
// SiLU forward and fused backward against a copy of the same bytes (the bandwidth
// ceiling), over a sweep of sizes: on the CPU (the kernels' threads, memcpy split the
// same way) and on CUDA (events, L2 flush, plus an unfused two-kernel baseline).
// Used by bench_cpu, bench_silu and `minitensor bench silu`.
#pragma once

#include <string>
#include <vector>

#include "tools/bench/progress.h"
#include "tools/bench/timing.h"

namespace mt::bench {

struct SiluCpuRow {
  std::string op;  // "silu_fwd" (8 bytes/element moved) or "silu_bwd" (12 bytes/element)
  int threads;
  int64_t n;
  double seconds, gbps;
  double copy_seconds, copy_gbps;  // memcpy moving the same bytes
  // The portable loop (kernels/cpu/math.h) where the AVX-512 one runs by default
  // (kernels/cpu/vec_exp.h), timed in the same sweep; NaN where there is no AVX-512.
  double portable_seconds;
};

// float32, n = 2^min_log2, 2^(min_log2+2), ... 2^max_log2, for each thread count (the
// kernels' thread count is left at the last one); each figure a median over at least 5
// runs and min_seconds.
std::vector<SiluCpuRow> silu_cpu_sweep(int min_log2, int max_log2, const std::vector<int>& threads,
                                       Progress& progress, double min_seconds = 0.25);

struct SiluCudaRow {
  std::string dtype, pass;  // "float32" / "bfloat16", "fwd" / "bwd"
  int log2n;
  double ms, gbps, pct_copy, copy_ms;
  double unfused_ms, speedup;  // NaN where the unfused baseline could not be compiled
  // The same pass as a user writes it, next to mt::silu / mt::silu_backward called as ops
  // (output allocated each call, as the user's kernels allocate theirs): the pointwise
  // builder (mt::jit::pointwise) and a plain grid-stride kernel through the typed launch.
  double op_ms, user_pointwise_ms, user_raw_ms;
};

// On cuda:device, for each dtype, n = 2^min_log2 ... 2^max_log2 in steps of 2^2.
std::vector<SiluCudaRow> silu_cuda_sweep(int device, const std::vector<DType>& dtypes, int min_log2,
                                         int max_log2, const CudaTiming& timing,
                                         Progress& progress);

}  // namespace mt::bench
