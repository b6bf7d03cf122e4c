// SPDX-License-Identifier: MIT
// matmul on the CPU: cblas_sgemm/dgemm when the build found cblas (MT_HAVE_CBLAS) and it
// runs kernels made for this CPU (Note [Which matmul kernel]); else the library's own
// packed GEMM (gemm.cpp); int64 uses a cache-blocked kernel.
//
// Note [Matmul layouts]
// A matrix view has a row stride rs and a column stride cs. cblas (row-major) takes it
// as is when cs == 1 and rs >= cols (NoTrans, ld = rs), or as the transpose of a
// row-major matrix when rs == 1 and cs >= rows (Trans, ld = cs): so a.t() or
// a.transpose(-1, -2) costs no copy. Only other layouts (a slice with a step along the
// columns, an expanded dim) are packed first. An output with rs == 1 is written as
// C^T = B^T A^T. Batches of a [B.., m, k] @ [k, n] whose rows merge into one strided dim
// become one [B*m, k] @ [k, n] call.
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/loops.h"
#include "runtime/view.h"

#ifdef MT_HAVE_CBLAS
#include <cblas.h>
#endif

namespace mt::cpu {
namespace {

#ifdef MT_HAVE_CBLAS
constexpr bool kBuiltWithBlas = true;
#else
constexpr bool kBuiltWithBlas = false;
#endif
std::atomic<MatmulKernel> g_kernel{MatmulKernel::Auto};

// Element (i, j) of one matrix is data[i * rs + j * cs] (strides in elements).
template <typename T>
struct Mat {
  T* data;
  int64_t rs, cs;
  T& at(int64_t i, int64_t j) const { return data[i * rs + j * cs]; }
};

// Note [Blocked matmul]
// int64's C = A B with C's rows contiguous (float32 and float64 use gemm.cpp). Threads
// split C's rows (one contiguous range each, one parallel region). Each thread walks B
// in KC x NC panels, packs the panel contiguous (so the inner loop is a plain loop and
// the panel stays in L2), and for each MR rows of its range adds a[i][k] * panel[k][:]
// to those rows, which stay in L1. Every element is summed in the same order whatever
// the thread count.
constexpr int64_t kNC = 256, kKC = 128, kMR = 4;

// Rows [i0, i0 + mr) of C += A[those rows, panel's k] @ panel; a points at A(i0, pc), c
// at C(i0, jc), bp at the packed kc x nc panel.
template <typename T>
void panel_rows(int64_t mr, int64_t kc, int64_t nc, const T* a, int64_t ars, int64_t acs,
                const T* bp, T* c, int64_t ldc) {
  if (mr == kMR) {
    // The four rows accumulate in a local tile whose rows are not 4 KiB apart: C's rows
    // often are (n = 1024 floats), and then loads and stores alias in the L1 and stall.
    constexpr int64_t kPad = kNC + 16;
    alignas(64) T acc[kMR * kPad];
    T *c0 = acc, *c1 = acc + kPad, *c2 = acc + 2 * kPad, *c3 = acc + 3 * kPad;
    std::fill(acc, acc + kMR * kPad, T(0));
    for (int64_t kk = 0; kk < kc; ++kk) {
      const T* br = bp + kk * nc;
      const T* ak = a + kk * acs;
      const T a0 = ak[0], a1 = ak[ars], a2 = ak[2 * ars], a3 = ak[3 * ars];
      MT_SIMD for (int64_t j = 0; j < nc; ++j) {
        c0[j] += a0 * br[j];
        c1[j] += a1 * br[j];
        c2[j] += a2 * br[j];
        c3[j] += a3 * br[j];
      }
    }
    for (int64_t r = 0; r < kMR; ++r) {
      T* cr = c + r * ldc;
      const T* ar = acc + r * kPad;
      MT_SIMD for (int64_t j = 0; j < nc; ++j) cr[j] += ar[j];
    }
    return;
  }
  for (int64_t i = 0; i < mr; ++i) {
    T* ci = c + i * ldc;
    for (int64_t kk = 0; kk < kc; ++kk) {
      const T* br = bp + kk * nc;
      const T ai = a[i * ars + kk * acs];
      MT_SIMD for (int64_t j = 0; j < nc; ++j) ci[j] += ai * br[j];
    }
  }
}
template <typename T>
void gemm_blocked(int64_t m, int64_t n, int64_t k, Mat<const T> A, Mat<const T> B, Mat<T> C,
                  bool threads) {
  auto rows = [&](int64_t b, int64_t e) {  // row blocks [b, e) of kMR rows
    const int64_t r0 = b * kMR, r1 = std::min(m, e * kMR);
    for (int64_t i = r0; i < r1; ++i) std::fill(&C.at(i, 0), &C.at(i, 0) + n, T(0));
    if (k == 0) return;
    std::vector<T> packed(size_t(std::min(kKC, k) * std::min(kNC, n)));
    T* bp = packed.data();
    for (int64_t jc = 0; jc < n; jc += kNC) {
      const int64_t nc = std::min(kNC, n - jc);
      for (int64_t pc = 0; pc < k; pc += kKC) {
        const int64_t kc = std::min(kKC, k - pc);
        for (int64_t kk = 0; kk < kc; ++kk)
          for (int64_t j = 0; j < nc; ++j) bp[kk * nc + j] = B.at(pc + kk, jc + j);
        for (int64_t i0 = r0; i0 < r1; i0 += kMR) {
          const int64_t mr = std::min(kMR, r1 - i0);
          const T* a = &A.at(i0, pc);
          T* c = &C.at(i0, jc);
          panel_rows<T>(mr, kc, nc, a, A.rs, A.cs, bp, c, C.rs);
        }
      }
    }
  };
  const int64_t blocks = (m + kMR - 1) / kMR;
  // At least 8 blocks (32 rows) a thread, so that packing B per thread stays cheap.
  const int64_t grain = std::max<int64_t>(8, 262144 / std::max<int64_t>(1, kMR * k * n));
  if (threads)
    parallel_for(blocks, grain, rows);
  else
    rows(0, blocks);
}

#ifdef MT_HAVE_CBLAS
// How cblas can read a rows x cols view (Note [Matmul layouts]); false: pack it first.
bool blas_layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs, bool* trans, int64_t* ld) {
  if ((cols == 1 || cs == 1) && (rows == 1 || rs >= std::max<int64_t>(1, cols))) {
    *trans = false;
    *ld = rows == 1 ? std::max<int64_t>(1, cols) : rs;
  } else if ((rows == 1 || rs == 1) && (cols == 1 || cs >= std::max<int64_t>(1, rows))) {
    *trans = true;
    *ld = cols == 1 ? std::max<int64_t>(1, rows) : cs;
  } else {
    return false;
  }
  return *ld <= INT_MAX;
}

void blas_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
               const float* b, int64_t ldb, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(m),
              int(n), int(k), 1.0f, a, int(lda), b, int(ldb), 0.0f, c, int(ldc));
}
void blas_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const double* a, int64_t lda,
               const double* b, int64_t ldb, double* c, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(m),
              int(n), int(k), 1.0, a, int(lda), b, int(ldb), 0.0, c, int(ldc));
}

// Note [Matmul on the pool]
// OpenBLAS runs on one thread (Note [The CPU thread pool]); a product worth threads is cut
// here into blocks of C's rows (or columns, when C is wider than tall), one cblas call
// each, on the library's pool. A block has at least 32 rows and about 2^20 multiply-adds,
// so that each call still packs a large enough panel.
template <typename T>
void blas_gemm_split(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda,
                     const T* b, int64_t ldb, T* c, int64_t ldc, bool threads) {
  const int64_t per_row = std::max<int64_t>(1, (m >= n ? n : m) * k);
  const int64_t grain = std::max<int64_t>(32, (int64_t(1) << 20) / per_row);
  if (!threads || std::max(m, n) <= grain)
    return blas_gemm(ta, tb, m, n, k, a, lda, b, ldb, c, ldc);
  if (m >= n) {  // rows [r0, r1) of C: rows of A
    parallel_for(m, grain, [&](int64_t r0, int64_t r1) {
      blas_gemm(ta, tb, r1 - r0, n, k, a + r0 * (ta ? 1 : lda), lda, b, ldb, c + r0 * ldc, ldc);
    });
  } else {  // columns [c0, c1) of C: columns of B
    parallel_for(n, grain, [&](int64_t c0, int64_t c1) {
      blas_gemm(ta, tb, m, c1 - c0, k, a, lda, b + c0 * (tb ? ldb : 1), ldb, c + c0, ldc);
    });
  }
}

// One product through cblas; false if C's layout does not suit it (the caller uses a
// contiguous temporary). A or B in a layout cblas cannot take is packed here.
template <typename T>
bool gemm_blas(int64_t m, int64_t n, int64_t k, Mat<const T> A, Mat<const T> B, Mat<T> C,
               bool threads) {
  bool c_trans;
  int64_t ldc;
  if (!blas_layout(m, n, C.rs, C.cs, &c_trans, &ldc)) return false;
  std::vector<T> pa, pb;
  bool ta, tb;
  int64_t lda, ldb;
  if (!blas_layout(m, k, A.rs, A.cs, &ta, &lda)) {
    pa.resize(size_t(m * k));
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < k; ++j) pa[size_t(i * k + j)] = A.at(i, j);
    A = {pa.data(), k, 1};
    ta = false, lda = std::max<int64_t>(1, k);
  }
  if (!blas_layout(k, n, B.rs, B.cs, &tb, &ldb)) {
    pb.resize(size_t(k * n));
    for (int64_t i = 0; i < k; ++i)
      for (int64_t j = 0; j < n; ++j) pb[size_t(i * n + j)] = B.at(i, j);
    B = {pb.data(), n, 1};
    tb = false, ldb = std::max<int64_t>(1, n);
  }
  if (c_trans)  // C^T = B^T A^T
    blas_gemm_split(!tb, !ta, n, m, k, B.data, ldb, A.data, lda, C.data, ldc, threads);
  else
    blas_gemm_split(ta, tb, m, n, k, A.data, lda, B.data, ldb, C.data, ldc, threads);
  return true;
}
#endif

// One row of an outer product, z[j] = x * y[j]: a stream of stores whose speed is the
// vector width's (ISA clones, Note [ISA clones]); vmap's per-sample weight gradients are a
// batch of these.
MT_ISA_CLONES void outer_row(float* __restrict z, float x, const float* __restrict y, int64_t n) {
  MT_SIMD
  for (int64_t j = 0; j < n; ++j) z[j] = x * y[j];
}
MT_ISA_CLONES void outer_row(double* __restrict z, double x, const double* __restrict y,
                             int64_t n) {
  MT_SIMD
  for (int64_t j = 0; j < n; ++j) z[j] = x * y[j];
}
void outer_row(int64_t* __restrict z, int64_t x, const int64_t* __restrict y, int64_t n) {
  for (int64_t j = 0; j < n; ++j) z[j] = x * y[j];
}

// Whether dims [0, n) of (sizes, strides) walk one strided dim; its stride goes to *s.
bool single_dim(const int64_t* sizes, const int64_t* strides, int n, int64_t* s) {
  int64_t expect = -1;
  *s = 1;
  for (int d = n - 1; d >= 0; --d) {
    if (sizes[d] == 1) continue;
    if (expect >= 0 && strides[d] != expect) return false;
    if (expect < 0) *s = strides[d];
    expect = strides[d] * sizes[d];
  }
  return true;
}

template <typename T>
void matmul_typed(const Tensor& a, const Tensor& b, const Tensor& out, bool use_blas) {
  const int64_t nd = out.dim(), nb = nd - 2;
  const int64_t m = out.size(-2), n = out.size(-1), k = a.size(-1);
  // Batch strides of a and b aligned to out's batch dims (0 where broadcast).
  int64_t bsz[kMaxDims] = {}, sa[kMaxDims] = {}, sb[kMaxDims] = {}, so[kMaxDims] = {};
  for (int64_t d = 0; d < nb; ++d) {
    bsz[d] = out.size(d);
    so[d] = out.stride(d);
    int64_t da = d - (nb - (a.dim() - 2)), db = d - (nb - (b.dim() - 2));
    sa[d] = da >= 0 && a.size(da) != 1 ? a.stride(da) : 0;
    sb[d] = db >= 0 && b.size(db) != 1 ? b.stride(db) : 0;
  }
  Mat<const T> A{static_cast<const T*>(a.data_ptr()), a.stride(-2), a.stride(-1)};
  Mat<const T> B{static_cast<const T*>(b.data_ptr()), b.stride(-2), b.stride(-1)};
  Mat<T> C{static_cast<T*>(out.data_ptr()), out.stride(-2), out.stride(-1)};
  int64_t batches = 1;
  for (int64_t d = 0; d < nb; ++d) batches *= bsz[d];

  auto one = [&](int64_t mm, Mat<const T> x, Mat<const T> y, Mat<T> z, bool threads) {
    if (k == 1) {  // an outer product: one pass over C, where BLAS zeroes it first and then
                   // adds (vmap's per-sample weight gradients are a batch of these)
      auto rows = [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
          const T xi = x.at(i, 0);
          if (z.cs == 1 && y.cs == 1) {  // contiguous rows: a vectorized loop
            outer_row(z.data + i * z.rs, xi, y.data, n);
          } else {
            for (int64_t j = 0; j < n; ++j) z.at(i, j) = xi * y.at(0, j);
          }
        }
      };
      if (threads && mm * n >= (int64_t(1) << 16))
        parallel_for(mm, std::max<int64_t>(1, (int64_t(1) << 14) / std::max<int64_t>(1, n)), rows);
      else
        rows(0, mm);
      return;
    }
#ifdef MT_HAVE_CBLAS
    if constexpr (!std::is_same_v<T, int64_t>) {
      if (use_blas && mm <= INT_MAX && n <= INT_MAX && k <= INT_MAX &&
          gemm_blas<T>(mm, n, k, x, y, z, threads))
        return;
    }
#endif
    (void)use_blas;
    if constexpr (!std::is_same_v<T, int64_t>) {
      gemm(mm, n, k, x.data, x.rs, x.cs, y.data, y.rs, y.cs, z.data, z.rs, z.cs, threads);
    } else {
      if (z.cs == 1 || n == 1) return gemm_blocked<T>(mm, n, k, x, y, z, threads);
      std::vector<T> tmp(size_t(mm * n));  // the blocked kernel writes contiguous rows
      gemm_blocked<T>(mm, n, k, x, y, {tmp.data(), n, 1}, threads);
      for (int64_t i = 0; i < mm; ++i)
        for (int64_t j = 0; j < n; ++j) z.at(i, j) = tmp[size_t(i * n + j)];
    }
  };

  // [B.., m, k] @ [k, n]: one call when a's and out's rows are one strided dim.
  bool b_broadcast = true, a_full = true;
  for (int64_t d = 0; d < nb; ++d) {
    b_broadcast = b_broadcast && sb[d] == 0;
    a_full = a_full && (sa[d] != 0 || bsz[d] == 1);
  }
  if (nb > 0 && b_broadcast && a_full && batches > 1) {
    int64_t sz[kMaxDims + 1], st_a[kMaxDims + 1], st_o[kMaxDims + 1], ra, ro;
    for (int64_t d = 0; d < nb; ++d) sz[d] = bsz[d], st_a[d] = sa[d], st_o[d] = so[d];
    sz[nb] = m, st_a[nb] = A.rs, st_o[nb] = C.rs;
    if (single_dim(sz, st_a, int(nb + 1), &ra) && single_dim(sz, st_o, int(nb + 1), &ro)) {
      one(batches * m, {A.data, ra, A.cs}, B, {C.data, ro, C.cs}, true);
      return;
    }
  }
  // Many small products: threads over the batch; else threads inside each product.
  const bool per_batch = batches > 1 && m * n * k < 64 * 64 * 64;
  auto run = [&](int64_t b0, int64_t e0) {
    for (int64_t bi = b0; bi < e0; ++bi) {
      int64_t oa = 0, ob = 0, oo = 0, rem = bi;
      for (int64_t d = nb - 1; d >= 0; --d) {
        int64_t i = rem % bsz[d];
        rem /= bsz[d];
        oa += i * sa[d], ob += i * sb[d], oo += i * so[d];
      }
      one(m, {A.data + oa, A.rs, A.cs}, {B.data + ob, B.rs, B.cs}, {C.data + oo, C.rs, C.cs},
          !per_batch);
    }
  };
  if (per_batch)
    parallel_for(batches, std::max<int64_t>(1, 32768 / std::max<int64_t>(1, m * n * k)), run);
  else
    run(0, batches);
}

// Whether out's matrices can be written in place by the path that will run.
bool out_layout_ok(const Tensor& out, bool use_blas) {
  const int64_t m = out.size(-2), n = out.size(-1), rs = out.stride(-2), cs = out.stride(-1);
  bool rows = (n == 1 || cs == 1) && (m == 1 || rs >= n);
  if (!use_blas) return rows;
  bool cols = (m == 1 || rs == 1) && (n == 1 || cs >= m);
  return rows || cols;
}

}  // namespace

// Note [Which matmul kernel]
// OpenBLAS built with DYNAMIC_ARCH picks its kernels from the CPU's model when it loads; a
// model its table does not know (a newer CPU, or one a hypervisor renames) gets old
// kernels such as Prescott's SSE3 ones, several times slower than the AVX2 or AVX-512
// ones the CPU runs. OPENBLAS_CORETYPE overrides that choice, but only when read as the
// library loads, before any code of ours runs, and an embedder's users will not set it.
// So float32/float64 matmul decides once, at first use, between cblas and the library's
// own packed GEMM (gemm.cpp): the own kernel when OpenBLAS reports one of the old cores
// below on a CPU with AVX2 or AVX-512, cblas otherwise. MT_MATMUL=blas or =own, read at
// the same time, forces one; set_matmul_kernel (set_use_blas(false) is MatmulKernel::Own,
// set_use_blas(true) MatmulKernel::Auto) overrides both at run time. blas_info()
// (minitensor doctor) says which runs and why.
namespace {
bool old_blas_core(std::string_view core) {
  static constexpr std::string_view kOld[] = {"Prescott",  "Katmai", "Coppermine", "Northwood",
                                              "Banias",    "Core2",  "Penryn",     "Dunnington",
                                              "Nehalem",   "Atom",   "Athlon",     "Opteron",
                                              "Barcelona", "Bobcat", "Unknown"};
  return std::find(std::begin(kOld), std::end(kOld), core) != std::end(kOld);
}
}  // namespace

MatmulChoice choose_matmul_kernel(std::string_view blas_core, bool avx2, bool avx512,
                                  const char* env) {
  const std::string_view e = env != nullptr ? env : "";
  if (e == "blas") return {true, "MT_MATMUL=blas"};
  if (e == "own") return {false, "MT_MATMUL=own"};
  std::string ignored =
      e.empty() ? "" : fmt::format("MT_MATMUL={} ignored: it takes blas or own", e);
  if (old_blas_core(blas_core) && (avx2 || avx512)) {
    std::string why = fmt::format(
        "OpenBLAS's {} kernels leave the CPU's {} unused; MT_MATMUL=blas, or "
        "OPENBLAS_CORETYPE={} set before the program starts, gives OpenBLAS's",
        blas_core, avx512 ? "AVX-512" : "AVX2", avx512 ? "SkylakeX" : "Haswell");
    return {false, ignored.empty() ? why : ignored + "; " + why};
  }
  return {true, ignored};
}

namespace {

std::string blas_core_name() {
#ifdef OPENBLAS_VERSION
  return openblas_get_corename();
#else
  return "";
#endif
}

// The automatic choice, made once (Note [Which matmul kernel]).
const MatmulChoice& auto_choice() {
  static const MatmulChoice choice = [] {
    bool avx2 = false, avx512 = false;
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
    __builtin_cpu_init();
    avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma");
#endif
    return choose_matmul_kernel(blas_core_name(), avx2, avx512, std::getenv("MT_MATMUL"));
  }();
  return choice;
}

bool blas_now() {
  if (!kBuiltWithBlas) return false;
  switch (g_kernel.load()) {
    case MatmulKernel::Blas:
      return true;
    case MatmulKernel::Own:
      return false;
    case MatmulKernel::Auto:
      break;
  }
  return auto_choice().blas;
}

}  // namespace

bool have_blas() { return blas_now(); }
void set_use_blas(bool use) { g_kernel.store(use ? MatmulKernel::Auto : MatmulKernel::Own); }
void set_matmul_kernel(MatmulKernel kernel) { g_kernel.store(kernel); }

std::string blas_info() {
  // The cache blocks only where they are not the defaults (MT_GEMM_BLOCKS, set_gemm_blocks).
  const std::string& note = gemm_blocks_note();  // first: it applies MT_GEMM_BLOCKS
  const GemmBlocks bl = gemm_blocks(), def;
  const bool custom = bl.kc != def.kc || bl.mc != def.mc || bl.nc != def.nc;
  const std::string own = fmt::format(
      "the library's own {} kernel{}{}", gemm_isa_name(gemm_isa()),
      custom ? fmt::format(" with blocks KC,MC,NC = {},{},{}", bl.kc, bl.mc, bl.nc) : "",
      note.empty() || custom ? "" : " (" + note + ")");
#ifdef MT_HAVE_CBLAS
#ifdef OPENBLAS_VERSION
  std::string version = OPENBLAS_VERSION;  // " OpenBLAS 0.3.21 "
  version.erase(0, version.find_first_not_of(' '));
  version.erase(version.find_last_not_of(' ') + 1);
  std::string text = version + ", kernels for " + blas_core_name();
#else
  std::string text = "cblas (not OpenBLAS: its kernels are not named)";
#endif
  const MatmulKernel mode = g_kernel.load();
  const std::string why = mode == MatmulKernel::Blas  ? "set_matmul_kernel(MatmulKernel::Blas)"
                          : mode == MatmulKernel::Own ? "set_use_blas(false)"
                                                      : auto_choice().why;
  return text + "; matmul runs " + (blas_now() ? std::string("cblas") : own) +
         (why.empty() ? "" : " (" + why + ")");
#else
  return "none; matmul runs " + own;
#endif
}

void matmul(const Tensor& a, const Tensor& b, const Tensor& out) {
  for (const Tensor* t : {&a, &b, &out}) {
    MT_CHECK(t->defined() && !t->is_fake() && t->is_cpu(),
             "[matmul] expects CPU tensors with data; move inputs with .cpu()");
  }
  MT_CHECK(a.dim() >= 2 && b.dim() >= 2,
           "[matmul] this kernel takes tensors of at least 2 dims, got {}-d and {}-d; unsqueeze "
           "a vector to [1, k] or [k, 1] first",
           a.dim(), b.dim());
  MT_CHECK(a.size(-1) == b.size(-2),
           "[matmul] shapes {} and {} cannot be multiplied: a has {} columns but b has {} rows",
           a.sizes(), b.sizes(), a.size(-1), b.size(-2));
  Shape ab(a.sizes().vec()), bb(b.sizes().vec());
  ab.resize(ab.size() - 2), bb.resize(bb.size() - 2);
  Shape expect = mt::detail::broadcast_shapes(ab, bb, "matmul");
  expect.push_back(a.size(-2));
  expect.push_back(b.size(-1));
  MT_CHECK(out.sizes() == expect, "[matmul] the output has shape {}, expected {}", out.sizes(),
           expect);
  MT_CHECK(out.dtype() != DType::Bool, "[matmul] bool tensors are not supported; cast to int64");
  MT_CHECK(out.storage() != a.storage() && out.storage() != b.storage(),
           "[matmul] the output shares memory with an input; write into a new tensor");
  if (out.numel() == 0) return;
  visit_compute(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    constexpr DType kT = dtype_v<T>;
    const bool use_blas = !std::is_same_v<T, int64_t> && blas_now();
    // Other dtypes (float16, bfloat16, mixed) compute in T through converted copies.
    auto as_t = [&](const Tensor& t) {
      if (t.dtype() == kT) return t;
      Tensor c = empty(t.sizes(), {.dtype = kT});
      mt::detail::copy_impl(c, t);
      return c;
    };
    Tensor ta = as_t(a), tb = as_t(b);
    if (out.dtype() == kT && out_layout_ok(out, use_blas || !std::is_same_v<T, int64_t>)) {
      matmul_typed<T>(ta, tb, out, use_blas);
    } else {
      Tensor tmp = empty(out.sizes(), {.dtype = kT});
      matmul_typed<T>(ta, tb, tmp, use_blas);
      mt::detail::copy_impl(out, tmp);
    }
  });
}

}  // namespace mt::cpu
