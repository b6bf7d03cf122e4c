// SPDX-License-Identifier: MIT
// The library's own float32/float64 GEMM: packed panels and a register-blocked
// micro-kernel, one variant per ISA chosen at run time.
//
// Note [Packed GEMM]
// The loops of GotoBLAS/BLIS, small. C is cut into column blocks of NC and B's rows
// into blocks of KC; each KC x NC block of B is packed into micro-panels of NR columns
// (kc x NR, contiguous, zero-padded), then each MC x KC block of A into micro-panels of
// MR rows (kc x MR). The micro-kernel adds one A micro-panel times one B micro-panel to
// an MR x NR tile of C that lives in registers for the whole kc loop: per k, NR/W vector
// loads of B, MR broadcasts of A, MR * NR/W fused multiply-adds. The B micro-panel
// (kc * NR * 4 bytes, 32 KiB for float32 on AVX-512) is reused across the MC rows from
// L1/L2, A's block (MC x KC) across the NC columns from L2. Strides, transposes and
// expanded dims are absorbed by the packing, so the kernel always reads contiguous
// panels; a tile at C's edge, or a C whose columns are not contiguous, goes through a
// small buffer.
// Micro-kernels (MR x NR, accumulators): AVX-512 6x32 float / 6x16 double (12 zmm),
// AVX2+FMA 6x16 / 6x8 (12 ymm), portable 4x8 / 4x4 (8 vectors of 16 bytes: SSE2,
// NEON). One template written with GCC vector types; the AVX2 and AVX-512 copies are
// compiled with target attributes (GCC on x86-64, as MT_ISA_CLONES in loops.h) and
// picked once from the CPU's flags.
// Threads: C is split into blocks of whole micro-tiles (rows when m >= n, else columns),
// each a serial GEMM on the pool. Blocks of rows all need all of B: when its packed copy
// takes at most 8 MiB it is packed once, on the pool, and shared, instead of once per
// block; blocks of columns pack their own part of B. Every element's sum runs
// over k in the same order (KC blocks, then k within a block) whatever the split, so
// results do not depend on the thread count.
#include "kernels/cpu/gemm.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kernels/cpu/loops.h"

// A unity build may compile this file with matmul.cpp: the internals get a namespace
// of their own.
namespace mt::cpu::packed_gemm {
namespace {

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(MT_NO_ISA_CLONES)
#define MT_GEMM_X86_VARIANTS 1
#endif

// The cache blocks (Note [Packed GEMM]): KC rows of B a block, NC columns, and MC rows of A
// (per kernel, below, unless MT_GEMM_BLOCKS or set_gemm_blocks says otherwise). Read once a
// call, so a change never splits one product between two blockings.
constexpr int64_t kKC = 256, kNC = 1024;
std::atomic<int64_t> g_kc{kKC}, g_mc{0}, g_nc{kNC};  // g_mc 0: the kernel's own
// Threads share one packed copy of B up to this many bytes (Note [Packed GEMM]).
constexpr int64_t kSharedB = int64_t(8) << 20;
constexpr int kMaxMR = 6, kMaxNR = 32;

// c[MR x NR tile, row stride ldc] (+)= ap (kc x MR) @ bp (kc x NR), NR = NV * W.
template <typename T, int MR, int NV, int W>
[[gnu::always_inline]] inline void micro(int64_t kc, const T* __restrict ap, const T* __restrict bp,
                                         T* __restrict c, int64_t ldc, bool add) {
  typedef T V __attribute__((vector_size(W * sizeof(T))));
  constexpr int NR = NV * W;
  V acc[MR][NV];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = V{};
  for (int64_t p = 0; p < kc; ++p) {
    V b[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) std::memcpy(&b[v], bp + v * W, sizeof(V));
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const T a = ap[r];
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] += a * b[v];
    }
    ap += MR;
    bp += NR;
  }
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      T* cp = c + r * ldc + v * W;
      V x = acc[r][v];
      if (add) {
        V old;
        std::memcpy(&old, cp, sizeof(V));
        x = old + x;
      }
      std::memcpy(cp, &x, sizeof(V));
    }
}

template <typename T>
using MicroFn = void (*)(int64_t kc, const T* ap, const T* bp, T* c, int64_t ldc, bool add);
template <typename T>
struct Kernel {
  int mr, nr;
  int64_t mc;  // rows of A per packed block
  MicroFn<T> fn;
  int64_t kc = kKC, nc = kNC;  // rows and columns of B per packed block
};

#ifdef MT_GEMM_X86_VARIANTS
__attribute__((target("avx512f,fma"))) void micro_f32_avx512(int64_t kc, const float* ap,
                                                             const float* bp, float* c, int64_t ldc,
                                                             bool add) {
  micro<float, 6, 2, 16>(kc, ap, bp, c, ldc, add);
}
__attribute__((target("avx512f,fma"))) void micro_f64_avx512(int64_t kc, const double* ap,
                                                             const double* bp, double* c,
                                                             int64_t ldc, bool add) {
  micro<double, 6, 2, 8>(kc, ap, bp, c, ldc, add);
}
__attribute__((target("avx2,fma"))) void micro_f32_avx2(int64_t kc, const float* ap,
                                                        const float* bp, float* c, int64_t ldc,
                                                        bool add) {
  micro<float, 6, 2, 8>(kc, ap, bp, c, ldc, add);
}
__attribute__((target("avx2,fma"))) void micro_f64_avx2(int64_t kc, const double* ap,
                                                        const double* bp, double* c, int64_t ldc,
                                                        bool add) {
  micro<double, 6, 2, 4>(kc, ap, bp, c, ldc, add);
}
#endif
void micro_f32_portable(int64_t kc, const float* ap, const float* bp, float* c, int64_t ldc,
                        bool add) {
  micro<float, 4, 2, 4>(kc, ap, bp, c, ldc, add);
}
void micro_f64_portable(int64_t kc, const double* ap, const double* bp, double* c, int64_t ldc,
                        bool add) {
  micro<double, 4, 2, 2>(kc, ap, bp, c, ldc, add);
}

GemmIsa best_isa() {
#ifdef MT_GEMM_X86_VARIANTS
  __builtin_cpu_init();  // this may run in a static initializer, before libgcc's
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma")) return GemmIsa::Avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return GemmIsa::Avx2;
#endif
  return GemmIsa::Portable;
}
std::atomic<GemmIsa> g_isa{best_isa()};

template <typename T>
Kernel<T> kernel_for(GemmIsa isa) {
  constexpr bool f32 = std::is_same_v<T, float>;
  switch (isa) {
#ifdef MT_GEMM_X86_VARIANTS
    case GemmIsa::Avx512:
      if constexpr (f32)
        return {6, 32, 144, micro_f32_avx512};
      else
        return {6, 16, 96, micro_f64_avx512};
    case GemmIsa::Avx2:
      if constexpr (f32)
        return {6, 16, 144, micro_f32_avx2};
      else
        return {6, 8, 96, micro_f64_avx2};
#else
    case GemmIsa::Avx512:
    case GemmIsa::Avx2:
#endif
    case GemmIsa::Portable:
      break;
  }
  if constexpr (f32)
    return {4, 8, 128, micro_f32_portable};
  else
    return {4, 4, 96, micro_f64_portable};
}

// The kernel with this call's cache blocks: MC rounded up to whole MR panels, NC to whole
// NR panels (the shared packed B lays its blocks out by NC).
template <typename T>
Kernel<T> with_blocks(Kernel<T> kr) {
  const int64_t mc = g_mc.load(std::memory_order_relaxed);
  if (mc > 0) kr.mc = (mc + kr.mr - 1) / kr.mr * kr.mr;
  kr.kc = g_kc.load(std::memory_order_relaxed);
  kr.nc = (g_nc.load(std::memory_order_relaxed) + kr.nr - 1) / kr.nr * kr.nr;
  return kr;
}

template <typename T>
struct Mat {
  const T* data;
  int64_t rs, cs;
  const T* ptr(int64_t i, int64_t j) const { return data + i * rs + j * cs; }
};

// Note [Packing transposed operands]
// A backward's products take transposed views (x^T @ dy, dy @ w^T): a column-major A or B,
// whose rows are a leading dimension apart. Gathering such a panel along its rows, as for a
// strided view, reads one element a cache line; at leading dimensions of 1 or 2 KiB (256 or
// 512 floats) those lines fall into 2 to 4 of L1's 64 sets, and a panel's 256 lines evict
// each other before the next row of the panel comes back for them. So a column-major A is
// packed down its columns (MR contiguous elements per k) and a column-major B down each
// column (KC contiguous elements per column): every line is read whole, once.
// Rows [i0, i0 + mc) x columns [p0, p0 + kc) of A into ceil(mc / MR) panels of kc x MR.
template <typename T>
void pack_a(Mat<T> A, int64_t i0, int64_t p0, int64_t mc, int64_t kc, int mr, T* dst) {
  for (int64_t ir = 0; ir < mc; ir += mr, dst += kc * mr) {
    const int64_t h = std::min<int64_t>(mr, mc - ir);
    if (A.cs != 1 && A.rs == 1) {
      // A column-major A (Note [Packing transposed operands]): a column's MR rows at a time.
      for (int64_t p = 0; p < kc; ++p) {
        const T* col = A.ptr(i0 + ir, p0 + p);
        T* d = dst + p * mr;
        for (int64_t r = 0; r < h; ++r) d[r] = col[r];
        for (int64_t r = h; r < mr; ++r) d[r] = T(0);
      }
      continue;
    }
    for (int r = 0; r < mr; ++r) {
      if (r >= h) {
        for (int64_t p = 0; p < kc; ++p) dst[p * mr + r] = T(0);
        continue;
      }
      const T* row = A.ptr(i0 + ir + r, p0);
      if (A.cs == 1) {
        for (int64_t p = 0; p < kc; ++p) dst[p * mr + r] = row[p];
      } else {
        for (int64_t p = 0; p < kc; ++p) dst[p * mr + r] = row[p * A.cs];
      }
    }
  }
}

// Rows [p0, p0 + kc) x columns [j0, j0 + nc) of B into ceil(nc / NR) panels of kc x NR.
template <typename T>
void pack_b(Mat<T> B, int64_t p0, int64_t j0, int64_t kc, int64_t nc, int nr, T* dst) {
  for (int64_t jr = 0; jr < nc; jr += nr, dst += kc * nr) {
    const int64_t w = std::min<int64_t>(nr, nc - jr);
    if (B.cs != 1 && B.rs == 1) {
      // A column-major B (Note [Packing transposed operands]): down each column.
      for (int64_t j = 0; j < nr; ++j) {
        T* d = dst + j;
        if (j >= w) {
          for (int64_t p = 0; p < kc; ++p) d[p * nr] = T(0);
          continue;
        }
        const T* col = B.ptr(p0, j0 + jr + j);
        for (int64_t p = 0; p < kc; ++p) d[p * nr] = col[p];
      }
      continue;
    }
    for (int64_t p = 0; p < kc; ++p) {
      const T* row = B.ptr(p0 + p, j0 + jr);
      T* d = dst + p * nr;
      if (B.cs == 1) {
        std::memcpy(d, row, size_t(w) * sizeof(T));
      } else {
        for (int64_t j = 0; j < w; ++j) d[j] = row[j * B.cs];
      }
      for (int64_t j = w; j < nr; ++j) d[j] = T(0);
    }
  }
}

// A buffer of at least n elements, 64-byte aligned, kept by the thread between calls.
template <typename T>
T* scratch(std::vector<T>& v, int64_t n) {
  constexpr int64_t kPad = 64 / sizeof(T);
  if (int64_t(v.size()) < n + kPad) v.resize(size_t(n + kPad));
  const auto addr = reinterpret_cast<uintptr_t>(v.data());
  return v.data() + (((64 - addr % 64) % 64) / sizeof(T));
}

// Where block (jc, pc) of B starts in a copy of all of B packed block after block (the
// blocks of one jc in pc order; a block's NC is a multiple of its kernel's NR).
int64_t packed_b_offset(int64_t n, int64_t k, int nr, int64_t nc_block, int64_t jc, int64_t pc) {
  const int64_t nc = std::min(nc_block, n - jc);
  return jc * k + pc * ((nc + nr - 1) / nr * nr);
}
int64_t packed_b_size(int64_t n, int64_t k, int nr, int64_t nc_block) {
  const int64_t last = (n - 1) / nc_block * nc_block;
  return packed_b_offset(n, k, nr, nc_block, last, k);
}

// C = A @ B for one block of C, on this thread. b_packed: all of B already packed
// (packed_b_offset), or null to pack B's blocks here.
template <typename T>
void gemm_serial(const Kernel<T>& kr, int64_t m, int64_t n, int64_t k, Mat<T> A, Mat<T> B, T* c,
                 int64_t crs, int64_t ccs, const T* b_packed = nullptr) {
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * crs + j * ccs] = T(0);
    return;
  }
  const int mr = kr.mr, nr = kr.nr;
  const int64_t KC = kr.kc, NC = kr.nc;
  const int64_t kc_max = std::min(KC, k);
  const int64_t nc_max = (std::min(NC, n) + nr - 1) / nr * nr;
  const int64_t mc_max = (std::min(kr.mc, m) + mr - 1) / mr * mr;
  thread_local std::vector<T> a_buf, b_buf;
  T* ap = scratch(a_buf, mc_max * kc_max);
  T* const b_own = b_packed == nullptr ? scratch(b_buf, kc_max * nc_max) : nullptr;
  alignas(64) T tile[kMaxMR * kMaxNR];
  for (int64_t jc = 0; jc < n; jc += NC) {
    const int64_t nc = std::min(NC, n - jc);
    for (int64_t pc = 0; pc < k; pc += KC) {
      const int64_t kc = std::min(KC, k - pc);
      const bool add = pc > 0;
      const T* bp = b_own;
      if (b_packed != nullptr)
        bp = b_packed + packed_b_offset(n, k, nr, NC, jc, pc);
      else
        pack_b(B, pc, jc, kc, nc, nr, b_own);
      for (int64_t ic = 0; ic < m; ic += kr.mc) {
        const int64_t mc = std::min(kr.mc, m - ic);
        pack_a(A, ic, pc, mc, kc, mr, ap);
        for (int64_t jr = 0; jr < nc; jr += nr) {
          const int64_t w = std::min<int64_t>(nr, nc - jr);
          const T* b = bp + jr * kc;
          for (int64_t ir = 0; ir < mc; ir += mr) {
            const int64_t h = std::min<int64_t>(mr, mc - ir);
            const T* a = ap + ir * kc;
            T* ct = c + (ic + ir) * crs + (jc + jr) * ccs;
            if (h == mr && w == nr && ccs == 1) {
              kr.fn(kc, a, b, ct, crs, add);
              continue;
            }
            kr.fn(kc, a, b, tile, nr, false);
            for (int64_t i = 0; i < h; ++i)
              for (int64_t j = 0; j < w; ++j) {
                T& out = ct[i * crs + j * ccs];
                out = add ? out + tile[i * nr + j] : tile[i * nr + j];
              }
          }
        }
      }
    }
  }
}

template <typename T>
void gemm_typed(int64_t m, int64_t n, int64_t k, Mat<T> A, Mat<T> B, T* c, int64_t crs, int64_t ccs,
                bool threads) {
  if (m <= 0 || n <= 0) return;
  (void)gemm_blocks_note();  // reads MT_GEMM_BLOCKS once
  const Kernel<T> kr = with_blocks(kernel_for<T>(g_isa.load(std::memory_order_relaxed)));
  // A block of at least 2^20 multiply-adds a thread, in whole micro-tiles.
  const bool by_rows = m >= n;
  const int64_t unit = by_rows ? kr.mr : kr.nr;
  const int64_t units = ((by_rows ? m : n) + unit - 1) / unit;
  const int64_t per_unit = std::max<int64_t>(1, unit * (by_rows ? n : m) * k);
  const int64_t grain = std::max<int64_t>(1, ((int64_t(1) << 20) + per_unit - 1) / per_unit);
  if (!threads || units <= grain) return gemm_serial(kr, m, n, k, A, B, c, crs, ccs);
  if (by_rows && k > 0 && packed_b_size(n, k, kr.nr, kr.nc) <= kSharedB / int64_t(sizeof(T))) {
    // Every block of rows needs all of B: pack it once (its blocks in parallel), share it.
    thread_local std::vector<T> shared;
    T* bs = scratch(shared, packed_b_size(n, k, kr.nr, kr.nc));
    const int64_t np = (k + kr.kc - 1) / kr.kc, nj = (n + kr.nc - 1) / kr.nc;
    parallel_for(nj * np, 1, [&](int64_t b0, int64_t b1) {
      for (int64_t blk = b0; blk < b1; ++blk) {
        const int64_t jc = blk / np * kr.nc, pc = blk % np * kr.kc;
        pack_b(B, pc, jc, std::min(kr.kc, k - pc), std::min(kr.nc, n - jc), kr.nr,
               bs + packed_b_offset(n, k, kr.nr, kr.nc, jc, pc));
      }
    });
    parallel_for(units, grain, [&](int64_t u0, int64_t u1) {
      const int64_t r0 = u0 * unit, r1 = std::min(m, u1 * unit);
      gemm_serial(kr, r1 - r0, n, k, {A.ptr(r0, 0), A.rs, A.cs}, B, c + r0 * crs, crs, ccs, bs);
    });
    return;
  }
  parallel_for(units, grain, [&](int64_t u0, int64_t u1) {
    if (by_rows) {
      const int64_t r0 = u0 * unit, r1 = std::min(m, u1 * unit);
      gemm_serial(kr, r1 - r0, n, k, {A.ptr(r0, 0), A.rs, A.cs}, B, c + r0 * crs, crs, ccs);
    } else {
      const int64_t c0 = u0 * unit, c1 = std::min(n, u1 * unit);
      gemm_serial(kr, m, c1 - c0, k, A, {B.ptr(0, c0), B.rs, B.cs}, c + c0 * ccs, crs, ccs);
    }
  });
}

}  // namespace
}  // namespace mt::cpu::packed_gemm

namespace mt::cpu {
using packed_gemm::gemm_typed;

void gemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t ars, int64_t acs, const float* b,
          int64_t brs, int64_t bcs, float* c, int64_t crs, int64_t ccs, bool threads) {
  gemm_typed<float>(m, n, k, {a, ars, acs}, {b, brs, bcs}, c, crs, ccs, threads);
}
void gemm(int64_t m, int64_t n, int64_t k, const double* a, int64_t ars, int64_t acs,
          const double* b, int64_t brs, int64_t bcs, double* c, int64_t crs, int64_t ccs,
          bool threads) {
  gemm_typed<double>(m, n, k, {a, ars, acs}, {b, brs, bcs}, c, crs, ccs, threads);
}

GemmBlocks gemm_blocks() {
  using namespace packed_gemm;
  return {g_kc.load(std::memory_order_relaxed), g_mc.load(std::memory_order_relaxed),
          g_nc.load(std::memory_order_relaxed)};
}
namespace {
bool store_gemm_blocks(GemmBlocks b) {
  using namespace packed_gemm;
  if (b.kc < 1 || b.kc > 65536 || b.mc < 0 || b.mc > 65536 || b.nc < 1 || b.nc > (1 << 20))
    return false;
  g_kc.store(b.kc, std::memory_order_relaxed);
  g_mc.store(b.mc, std::memory_order_relaxed);
  g_nc.store(b.nc, std::memory_order_relaxed);
  return true;
}
}  // namespace
bool set_gemm_blocks(GemmBlocks b) {
  (void)gemm_blocks_note();  // MT_GEMM_BLOCKS first, so this call has the last word
  return store_gemm_blocks(b);
}
std::optional<GemmBlocks> parse_gemm_blocks(std::string_view text) {
  int64_t v[3];
  for (int i = 0; i < 3; ++i) {
    const size_t end = i < 2 ? text.find(',') : text.size();
    if (end == std::string_view::npos || end == 0 || end > 9) return std::nullopt;
    v[i] = 0;
    for (char ch : text.substr(0, end)) {
      if (ch < '0' || ch > '9') return std::nullopt;
      v[i] = v[i] * 10 + (ch - '0');
    }
    text.remove_prefix(i < 2 ? end + 1 : end);
  }
  return GemmBlocks{v[0], v[1], v[2]};
}
const std::string& gemm_blocks_note() {
  static const std::string note = [] {
    const char* e = std::getenv("MT_GEMM_BLOCKS");
    if (e == nullptr) return std::string();
    const auto b = parse_gemm_blocks(e);
    if (b && store_gemm_blocks(*b)) return std::string("MT_GEMM_BLOCKS=") + e;
    return std::string("MT_GEMM_BLOCKS=") + e +
           " ignored: it takes KC,MC,NC (1 <= KC <= 65536, 0 <= MC <= 65536, 1 <= NC <= 1048576)";
  }();
  return note;
}

GemmIsa gemm_isa() { return packed_gemm::g_isa.load(std::memory_order_relaxed); }
GemmIsa gemm_best_isa() { return packed_gemm::best_isa(); }
bool set_gemm_isa(GemmIsa isa) {
  if (int(isa) > int(packed_gemm::best_isa())) return false;
  packed_gemm::g_isa.store(isa, std::memory_order_relaxed);
  return true;
}
const char* gemm_isa_name(GemmIsa isa) {
  switch (isa) {
    case GemmIsa::Avx512:
      return "AVX-512";
    case GemmIsa::Avx2:
      return "AVX2";
    case GemmIsa::Portable:
      break;
  }
  return "portable";
}

}  // namespace mt::cpu
