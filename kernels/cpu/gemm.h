// SPDX-License-Identifier: MIT
// The library's own float32/float64 GEMM (Note [Packed GEMM] in gemm.cpp): what matmul
// runs without BLAS, after set_use_blas(false), or where OpenBLAS runs old kernels.
#pragma once

#include <cstdint>

namespace mt::cpu {

// C = A @ B for an m x k A and a k x n B; element (i, j) of a matrix is
// data[i * rs + j * cs] (strides in elements, not negative: any layout, transposed, sliced or
// expanded). C must not overlap A or B. threads: split C over the library's pool.
void gemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t ars, int64_t acs, const float* b,
          int64_t brs, int64_t bcs, float* c, int64_t crs, int64_t ccs, bool threads);
void gemm(int64_t m, int64_t n, int64_t k, const double* a, int64_t ars, int64_t acs,
          const double* b, int64_t brs, int64_t bcs, double* c, int64_t crs, int64_t ccs,
          bool threads);

// The micro-kernel variants, in order; the best one the CPU has runs by default.
enum class GemmIsa { Portable, Avx2, Avx512 };
GemmIsa gemm_isa();       // the one that runs
GemmIsa gemm_best_isa();  // the best this CPU (and build) has
// Runs `isa` from now on (tests and benchmarks compare them); false, and no change, when
// the CPU or the build lacks it.
bool set_gemm_isa(GemmIsa isa);
const char* gemm_isa_name(GemmIsa isa);  // "AVX-512", "AVX2", "portable"

}  // namespace mt::cpu
