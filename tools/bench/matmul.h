// SPDX-License-Identifier: MIT
// Square float32 matmul, time and GFLOP/s over a sweep of sizes, next to the copy floor
// (a copy moving the bytes a matmul must move at least: read A and B, write C).
// CPU: cblas and the library's own kernel (gemm.cpp), per thread count; CUDA: mt::matmul on
// device tensors, timed with events. Used by bench_cpu and `minitensor bench matmul`.
#pragma once

#include <string>
#include <vector>

#include "tools/bench/progress.h"
#include "tools/bench/timing.h"

namespace mt::bench {

struct MatmulRow {
  int64_t size;
  std::string path;  // "blas", "own" (CPU) or "mt::matmul" (CUDA)
  int threads;       // 0 on CUDA
  double seconds, gflops;
  double copy_seconds;  // NaN where not measured
};

// with_copy: also time the copy floor per size (bench_cpu does not print it).
std::vector<MatmulRow> matmul_cpu_sweep(const std::vector<int64_t>& sizes,
                                        const std::vector<int>& threads, bool with_copy,
                                        Progress& progress, double min_seconds = 0.25);
std::vector<MatmulRow> matmul_cuda_sweep(int device, const std::vector<int64_t>& sizes,
                                         const CudaTiming& timing, Progress& progress);

}  // namespace mt::bench
