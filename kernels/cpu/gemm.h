// SPDX-License-Identifier: MIT
// The library's own float32/float64 GEMM (Note [Packed GEMM] in gemm.cpp): what matmul
// runs without BLAS, after set_use_blas(false), or where OpenBLAS runs old kernels.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

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

// The cache blocks (Note [Packed GEMM]): KC rows of B a packed block, MC rows of A (0: the
// micro-kernel's own, 144 float / 96 double on x86), NC columns of B. Defaults 256, 0, 1024;
// MT_GEMM_BLOCKS=KC,MC,NC sets them at start-up (a sweep on a new CPU: tools/scripts/
// gpu_check.sh's step cpu-gemm). MC is rounded up to whole MR panels, NC to whole NR panels.
struct GemmBlocks {
  int64_t kc = 256, mc = 0, nc = 1024;
};
GemmBlocks gemm_blocks();  // MT_GEMM_BLOCKS applies at the first product or gemm_blocks_note()
// false, and no change, unless 1 <= kc <= 65536, 0 <= mc <= 65536 and 1 <= nc <= 2^20.
bool set_gemm_blocks(GemmBlocks b);
// Parses MT_GEMM_BLOCKS's value "KC,MC,NC"; nullopt for anything else.
std::optional<GemmBlocks> parse_gemm_blocks(std::string_view text);
// What start-up made of MT_GEMM_BLOCKS: "" (unset), "MT_GEMM_BLOCKS=..." or why it was ignored.
const std::string& gemm_blocks_note();

}  // namespace mt::cpu
