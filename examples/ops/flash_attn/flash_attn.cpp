// SPDX-License-Identifier: MIT
// mha::flash_attn, written the way a user writes a custom op: a blocked CPU kernel (the
// reference), the CUDA kernels of flash_attn.cu launched through mt::jit::kernel, and the
// registrations.
#include "flash_attn.h"

#include <algorithm>
#include <any>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "flash_attn_cu.h"  // kFlashAttnCu: flash_attn.cu's text (embed_cu.py)

// OpenMP over independent tasks, only when there is enough work to pay for the threads
// (gradcheck's thousands of tiny calls would otherwise mostly wait on them).
#ifdef _OPENMP
#define MHA_PRAGMA(x) _Pragma(#x)
#define MHA_OMP_FOR_IF(cond) MHA_PRAGMA(omp parallel for schedule(dynamic, 1) if(cond))
#else
#define MHA_OMP_FOR_IF(cond)
#endif

using namespace mt;

namespace mha {
namespace {

constexpr int64_t kMaxCudaHeadDim = 128;  // the generic kernels' limit

struct Geometry {
  int64_t B = 0, H = 0, Sq = 0, Sk = 0, D = 0;
  double scale = 1;
  bool causal = false;
  DType lse_dtype = DType::Float32;
};

bool is_16bit(DType t) { return t == DType::Float16 || t == DType::BFloat16; }

// The checks every kernel (CPU, CUDA, fake) makes.
Geometry check_inputs(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                      std::optional<double> scale) {
  MT_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4,
           "[mha::flash_attn] q, k and v must be 4-D [batch, heads, seq, head_dim], got shapes "
           "{}, {} and {}; for [batch, seq, heads, head_dim] pass x.transpose(1, 2)",
           q.sizes(), k.sizes(), v.sizes());
  MT_CHECK(k.sizes() == v.sizes(),
           "[mha::flash_attn] k and v must have one shape [batch, heads, seq_k, head_dim], got "
           "{} and {}",
           k.sizes(), v.sizes());
  MT_CHECK(
      q.sizes()[0] == k.sizes()[0] && q.sizes()[1] == k.sizes()[1] && q.sizes()[3] == k.sizes()[3],
      "[mha::flash_attn] q {} and k {} must agree in batch, heads and head_dim (only the "
      "sequence lengths may differ)",
      q.sizes(), k.sizes());
  const DType t = q.dtype();
  MT_CHECK(
      t == DType::Float16 || t == DType::BFloat16 || t == DType::Float32 || t == DType::Float64,
      "[mha::flash_attn] q must be float16, bfloat16, float32 or float64, got {}", t);
  MT_CHECK(k.dtype() == t && v.dtype() == t,
           "[mha::flash_attn] q, k and v must have one dtype, got {}, {} and {}; convert with "
           ".to(dtype)",
           t, k.dtype(), v.dtype());
  MT_CHECK(k.device() == q.device() && v.device() == q.device(),
           "[mha::flash_attn] q, k and v must be on one device, got {}, {} and {}", q.device(),
           k.device(), v.device());
  Geometry g;
  g.B = q.sizes()[0];
  g.H = q.sizes()[1];
  g.Sq = q.sizes()[2];
  g.Sk = k.sizes()[2];
  g.D = q.sizes()[3];
  MT_CHECK(g.D > 0, "[mha::flash_attn] head_dim must be at least 1, got shape {}", q.sizes());
  MT_CHECK(g.Sk > 0 || g.Sq == 0,
           "[mha::flash_attn] k and v have no keys (seq_k = 0), so the softmax of {} queries is "
           "undefined; pass at least one key",
           g.Sq);
  if (q.is_cuda()) {
    MT_CHECK(g.D <= kMaxCudaHeadDim,
             "[mha::flash_attn] head_dim {} is not supported on CUDA: at most {} (64 and 128 "
             "take the tensor-core kernels); split the heads or run on the CPU",
             g.D, kMaxCudaHeadDim);
    MT_CHECK(g.B * g.H <= 65535 && g.Sq < (int64_t(1) << 31) && g.Sk < (int64_t(1) << 31),
             "[mha::flash_attn] on CUDA batch * heads must be at most 65535 and the sequences "
             "shorter than 2^31, got {} x {} and {}, {}",
             g.B, g.H, g.Sq, g.Sk);
  }
  g.scale = scale.has_value() ? *scale : 1.0 / std::sqrt(double(g.D));
  MT_CHECK(std::isfinite(g.scale), "[mha::flash_attn] scale must be finite, got {}", g.scale);
  g.causal = causal;
  g.lse_dtype = t == DType::Float64 ? DType::Float64 : DType::Float32;
  return g;
}

Shape lse_shape(const Geometry& g) { return {g.B, g.H, g.Sq}; }

// ------------------------------------------------------------------------------- CPU

// Note [CPU reference]
// Row by row with the online softmax over blocks of 64 keys (the CUDA kernels' recurrence,
// in the accumulation type A: float, or double for float64), parallel over (b, h, query
// block). Float16 and bfloat16 inputs are widened to float first.
constexpr int64_t kCpuKeys = 64, kCpuRows = 16;

template <typename A>
void cpu_forward(const A* q, const A* k, const A* v, A* out, A* lse, const Geometry& g) {
  const int64_t BH = g.B * g.H, n_qb = (g.Sq + kCpuRows - 1) / kCpuRows, D = g.D;
  const A scale = A(g.scale);
  const bool parallel = BH * g.Sq * g.Sk * D > (int64_t(1) << 18);
  MHA_OMP_FOR_IF(parallel)
  for (int64_t task = 0; task < BH * n_qb; ++task) {
    const int64_t bh = task / n_qb, i0 = task % n_qb * kCpuRows;
    const A* kb = k + bh * g.Sk * D;
    const A* vb = v + bh * g.Sk * D;
    std::vector<A> acc = std::vector<A>(size_t(D)), s = std::vector<A>(size_t(kCpuKeys));
    for (int64_t i = i0; i < std::min(g.Sq, i0 + kCpuRows); ++i) {
      const A* qi = q + (bh * g.Sq + i) * D;
      std::fill(acc.begin(), acc.end(), A(0));
      A m = -std::numeric_limits<A>::infinity(), l = 0;
      const int64_t n = g.causal ? std::min(i + 1, g.Sk) : g.Sk;
      for (int64_t j0 = 0; j0 < n; j0 += kCpuKeys) {
        const int64_t nb = std::min(kCpuKeys, n - j0);
        A mb = m;
        for (int64_t j = 0; j < nb; ++j) {
          A dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += qi[d] * kb[(j0 + j) * D + d];
          s[size_t(j)] = dot * scale;
          mb = std::max(mb, s[size_t(j)]);
        }
        const A alpha = std::exp(m - mb);
        l *= alpha;
        for (int64_t d = 0; d < D; ++d) acc[size_t(d)] *= alpha;
        for (int64_t j = 0; j < nb; ++j) {
          const A p = std::exp(s[size_t(j)] - mb);
          l += p;
          for (int64_t d = 0; d < D; ++d) acc[size_t(d)] += p * vb[(j0 + j) * D + d];
        }
        m = mb;
      }
      A* o = out + (bh * g.Sq + i) * D;
      for (int64_t d = 0; d < D; ++d) o[d] = acc[size_t(d)] / l;
      lse[bh * g.Sq + i] = m + std::log(l);
    }
  }
}

// FlashAttention-2's backward in loops: delta = rowsum(dO * O) - grad_lse, then per (b, h)
// P recomputed from lse, dS = P (dP - delta); nothing of size S x S is kept.
template <typename A>
void cpu_backward(const A* q, const A* k, const A* v, const A* out, const A* dout, const A* glse,
                  const A* lse, A* dq, A* dk, A* dv, const Geometry& g) {
  const int64_t BH = g.B * g.H, D = g.D;
  const A scale = A(g.scale);
  const bool parallel = BH * g.Sq * g.Sk * D > (int64_t(1) << 18);
  MHA_OMP_FOR_IF(parallel)
  for (int64_t bh = 0; bh < BH; ++bh) {
    const A* kb = k + bh * g.Sk * D;
    const A* vb = v + bh * g.Sk * D;
    A* dkb = dk + bh * g.Sk * D;
    A* dvb = dv + bh * g.Sk * D;
    for (int64_t i = 0; i < g.Sq; ++i) {
      const int64_t r = bh * g.Sq + i;
      const A* qi = q + r * D;
      const A* doi = dout + r * D;
      A delta = glse ? -glse[r] : A(0);
      for (int64_t d = 0; d < D; ++d) delta += doi[d] * out[r * D + d];
      A* dqi = dq + r * D;
      const int64_t n = g.causal ? std::min(i + 1, g.Sk) : g.Sk;
      for (int64_t j = 0; j < n; ++j) {
        A s = 0, dp = 0;
        for (int64_t d = 0; d < D; ++d) {
          s += qi[d] * kb[j * D + d];
          dp += doi[d] * vb[j * D + d];
        }
        const A p = std::exp(s * scale - lse[r]), ds = p * (dp - delta) * scale;
        for (int64_t d = 0; d < D; ++d) {
          dqi[d] += ds * kb[j * D + d];
          dkb[j * D + d] += ds * qi[d];
          dvb[j * D + d] += p * doi[d];
        }
      }
    }
  }
}

DType acc_dtype(DType t) { return t == DType::Float64 ? DType::Float64 : DType::Float32; }

Tensor widened(const Tensor& t, DType a) { return t.cpu().to(a).contiguous(); }

std::tuple<Tensor, Tensor> forward_cpu(const Tensor& q, const Tensor& k, const Tensor& v,
                                       bool causal, std::optional<double> scale) {
  const Geometry g = check_inputs(q, k, v, causal, scale);
  const DType a = acc_dtype(q.dtype());
  Tensor qa = widened(q, a), ka = widened(k, a), va = widened(v, a);
  Tensor out = empty(q.sizes(), {.dtype = a}), lse = empty(lse_shape(g), {.dtype = a});
  if (a == DType::Float64)
    cpu_forward<double>(qa.data_ptr<double>(), ka.data_ptr<double>(), va.data_ptr<double>(),
                        out.data_ptr<double>(), lse.data_ptr<double>(), g);
  else
    cpu_forward<float>(qa.data_ptr<float>(), ka.data_ptr<float>(), va.data_ptr<float>(),
                       out.data_ptr<float>(), lse.data_ptr<float>(), g);
  return {out.to(q.dtype()), lse};
}

std::tuple<Tensor, Tensor, Tensor> backward_cpu(const Tensor& grad_out, const Tensor& grad_lse,
                                                const Tensor& q, const Tensor& k, const Tensor& v,
                                                const Tensor& out, const Tensor& lse,
                                                const Geometry& g) {
  const DType a = acc_dtype(q.dtype());
  Tensor qa = widened(q, a), ka = widened(k, a), va = widened(v, a), oa = widened(out, a),
         la = widened(lse, a);
  Tensor ga = grad_out.defined() ? widened(grad_out, a) : zeros(q.sizes(), {.dtype = a});
  Tensor gl = grad_lse.defined() ? widened(grad_lse, a) : Tensor();
  Tensor dq = zeros(q.sizes(), {.dtype = a}), dk = zeros(k.sizes(), {.dtype = a}),
         dv = zeros(v.sizes(), {.dtype = a});
  auto run = [&](auto* tag) {
    using A = std::remove_pointer_t<decltype(tag)>;
    cpu_backward<A>(qa.data_ptr<A>(), ka.data_ptr<A>(), va.data_ptr<A>(), oa.data_ptr<A>(),
                    ga.data_ptr<A>(), gl.defined() ? gl.data_ptr<A>() : nullptr, la.data_ptr<A>(),
                    dq.data_ptr<A>(), dk.data_ptr<A>(), dv.data_ptr<A>(), g);
  };
  if (a == DType::Float64)
    run(static_cast<double*>(nullptr));
  else
    run(static_cast<float*>(nullptr));
  return {dq.to(q.dtype()), dk.to(q.dtype()), dv.to(q.dtype())};
}

// ------------------------------------------------------------------------------ CUDA

bool tensor_core_ok(DType t, int64_t D) { return is_16bit(t) && (D == 64 || D == 128); }

enum class K {
  Forward,
  ForwardSm90,
  ForwardSm90Serial,
  Backward,
  Prep,
  ForwardGeneric,
  DqGeneric,
  DkdvGeneric
};

const char* cu_type(DType t) {
  switch (t) {
    case DType::Float16:
      return "mt::Half";
    case DType::BFloat16:
      return "mt::BFloat16";
    case DType::Float64:
      return "double";
    default:
      return "float";
  }
}

// The tuned choices of the tensor-core kernels (Note [Tuned tiles]): row tiles a forward
// warp, warps a backward block.
struct Variant {
  int fwd_row_tiles = 2, bwd_warps = 8;
};

std::string kernel_name(K which, DType t, int64_t D, Variant var = {}) {
  const FlashAttnTiles tiles = flash_attn_tiles(int(D), var.fwd_row_tiles, var.bwd_warps);
  const std::string ty = cu_type(t);
  switch (which) {
    case K::Forward:
      return fmt::format("flash_attn_fwd<{}, {}, {}, {}>", ty, D, tiles.fwd_threads / 32,
                         tiles.fwd_rows / (16 * (tiles.fwd_threads / 32)));
    case K::ForwardSm90:
    case K::ForwardSm90Serial: {
      const bool overlap = which == K::ForwardSm90;
      const FlashAttnSm90Tiles h = flash_attn_sm90_tiles(int(D), overlap);
      return fmt::format("flash_attn_fwd_sm90<{}, {}, {}, {}, {}>", ty, D, h.keys, h.threads / 128,
                         overlap);
    }
    case K::Backward:
      return fmt::format("flash_attn_bwd<{}, {}, {}, {}>", ty, D, tiles.bwd_rows, tiles.bwd_warps);
    case K::Prep:
      return fmt::format("flash_attn_bwd_prep<{}>", ty);
    case K::ForwardGeneric:
      return fmt::format("flash_attn_fwd_generic<{}>", ty);
    case K::DqGeneric:
      return fmt::format("flash_attn_bwd_dq_generic<{}>", ty);
    case K::DkdvGeneric:
      return fmt::format("flash_attn_bwd_dkdv_generic<{}>", ty);
  }
  return {};
}

// One UserKernel per name, made on first use (a kernel compiles on its first launch).
const jit::UserKernel& cu_kernel(K which, DType t, int64_t D, Variant var = {}) {
  static std::mutex mu;
  static std::map<std::string, jit::UserKernel> made;
  const std::string name = kernel_name(which, t, D, var);
  std::lock_guard<std::mutex> lock(mu);
  auto it = made.find(name);
  if (it == made.end()) {
    // The Hopper kernel's wgmma exists on the arch-specific target sm_90a only.
    jit::UserKernel kern =
        which == K::ForwardSm90 || which == K::ForwardSm90Serial
            ? jit::kernel(
                  {.name = "flash_attn_fwd_sm90.cu", .source = kFlashAttnCu, .arch_specific = true},
                  name)
            : jit::kernel(kFlashAttnCu, name);
    it = made.emplace(name, std::move(kern)).first;
  }
  return it->second;
}

// Note [Tuned tiles]
// Two choices of the tensor-core kernels are left to the JIT's autotuner
// (kernels/jit/kernel.h), each a pair of candidates of one key:
//  - the forward: two 16-row tiles a warp (128 query rows a block of 4 warps) or one (64
//    rows: fewer registers, twice the blocks, better when the grid is small);
//  - the backward: blocks of 8 warps (128 keys) or 4 (64 keys).
// The first candidate is the default (what MT_AUTOTUNE=0 runs). A key is the op and pass,
// the dtype, head dim, causal, and powers of two at least Sq, Sk and batch * heads (the
// last decides how many blocks fill the card); the tuner adds the device. The knobs
// MHA_FLASH_ATTN_FWD_ROW_TILES=1|2 and MHA_FLASH_ATTN_BWD_WARPS=4|8 force a candidate
// (read at each call: the bench's comparison columns).
const std::vector<Variant>& fwd_variants() {
  static const std::vector<Variant> v = {{.fwd_row_tiles = 2}, {.fwd_row_tiles = 1}};
  return v;
}
const std::vector<Variant>& bwd_variants() {
  static const std::vector<Variant> v = {{.bwd_warps = 8}, {.bwd_warps = 4}};
  return v;
}
std::string variant_name(bool backward, Variant v) {
  return backward ? fmt::format("bwd_warps={}", v.bwd_warps)
                  : fmt::format("fwd_row_tiles={}", v.fwd_row_tiles);
}

// The knob's value as a candidate name, or "" when unset.
std::string knob(const char* name, const char* a, const char* b, const char* prefix) {
  const char* e = std::getenv(name);
  if (e == nullptr || *e == '\0') return {};
  const std::string v = e;
  MT_CHECK(v == a || v == b,
           "[mha::flash_attn] {}='{}' must be {} or {}; unset it to let the autotuner choose", name,
           v, a, b);
  return prefix + v;
}

std::string tune_key(bool backward, DType t, const Geometry& g) {
  return fmt::format("mha::flash_attn {} {} D{} {} Sq{} Sk{} BH{}", backward ? "bwd" : "fwd", t,
                     g.D, g.causal ? "causal" : "full", jit::pow2_bucket(g.Sq),
                     jit::pow2_bucket(g.Sk), jit::pow2_bucket(g.B * g.H));
}

// The tensor-core kernels read rows as 16-byte vectors: contiguous, 16-byte aligned.
Tensor prepared(const Tensor& t) {
  Tensor c = t.contiguous();
  if (reinterpret_cast<uintptr_t>(c.data_ptr()) % 16 != 0) c = c.clone();
  return c;
}

// Which tensor-core forward: the mma.sync kernels (any GPU) or the wgmma ones (sm_90a;
// Sm90Serial: without Note [Overlapped tiles]).
enum class FwdKernel { Mma, Sm90, Sm90Serial };

// Each launch of the op, handed to f(kernel, config, args...): the launch and the
// GPU-less argument check run the same code.
template <typename F>
void with_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                  const Tensor& lse, const Geometry& g, bool generic, Variant var, FwdKernel fk,
                  F&& f) {
  const DType t = q.dtype();
  if (!generic && fk != FwdKernel::Mma) {
    const bool overlap = fk == FwdKernel::Sm90;
    const FlashAttnSm90Tiles h = flash_attn_sm90_tiles(int(g.D), overlap);
    const unsigned blocks = unsigned((g.Sq + h.rows - 1) / h.rows);
    f(cu_kernel(overlap ? K::ForwardSm90 : K::ForwardSm90Serial, t, g.D),
      jit::LaunchConfig{.grid = {std::max(blocks, 1u), unsigned(g.B * g.H)},
                        .block = unsigned(h.threads),
                        .shared = unsigned(h.smem)},
      q, k, v, out, lse, int(g.Sq), int(g.Sk), float(g.scale * 1.4426950408889634), int(g.causal));
  } else if (!generic) {
    const FlashAttnTiles tiles = flash_attn_tiles(int(g.D), var.fwd_row_tiles, var.bwd_warps);
    const unsigned blocks = unsigned((g.Sq + tiles.fwd_rows - 1) / tiles.fwd_rows);
    f(cu_kernel(K::Forward, t, g.D, var),
      jit::LaunchConfig{.grid = {std::max(blocks, 1u), unsigned(g.B * g.H)},
                        .block = unsigned(tiles.fwd_threads),
                        .shared = unsigned(tiles.fwd_smem)},
      q, k, v, out, lse, int(g.Sq), int(g.Sk), float(g.scale * 1.4426950408889634), int(g.causal));
  } else {
    const long long rows = g.B * g.H * g.Sq;
    f(cu_kernel(K::ForwardGeneric, t, g.D),
      jit::LaunchConfig{.grid = jit::grid_for(rows, 128), .block = 128}, q, k, v, out, lse, rows,
      int(g.Sq), int(g.Sk), int(g.D), g.scale, g.causal);
  }
}

// The backward's pre-pass: delta = rowsum(dO * O) - grad_lse.
template <typename F>
void with_backward_prep(const Tensor& out, const Tensor& dout, const Tensor& glse,
                        const Tensor& delta, const Geometry& g, DType t, F&& f) {
  const long long rows_q = g.B * g.H * g.Sq;
  f(cu_kernel(K::Prep, t, g.D), jit::LaunchConfig{.grid = jit::grid_for(rows_q, 256)}, out, dout,
    glse, delta, rows_q, int(g.D));
}

// The backward's main pass (after the pre-pass); the tensor-core kernel accumulates into
// dq, which must be zero.
template <typename F>
void with_backward_main(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout,
                        const Tensor& lse, const Tensor& delta, const Tensor& dq, const Tensor& dk,
                        const Tensor& dv, const Geometry& g, bool generic, Variant var, F&& f) {
  const DType t = q.dtype();
  const long long rows_q = g.B * g.H * g.Sq, rows_k = g.B * g.H * g.Sk;
  if (!generic) {
    const FlashAttnTiles tiles = flash_attn_tiles(int(g.D), var.fwd_row_tiles, var.bwd_warps);
    const int keys = 16 * tiles.bwd_warps;
    const unsigned blocks = unsigned((g.Sk + keys - 1) / keys);
    f(cu_kernel(K::Backward, t, g.D, var),
      jit::LaunchConfig{.grid = {std::max(blocks, 1u), unsigned(g.B * g.H)},
                        .block = unsigned(32 * tiles.bwd_warps),
                        .shared = unsigned(tiles.bwd_smem)},
      q, k, v, dout, lse, delta, dq, dk, dv, int(g.Sq), int(g.Sk), float(g.scale), int(g.causal));
  } else {
    f(cu_kernel(K::DqGeneric, t, g.D),
      jit::LaunchConfig{.grid = jit::grid_for(rows_q, 128), .block = 128}, q, k, v, dout, lse,
      delta, dq, rows_q, int(g.Sq), int(g.Sk), int(g.D), g.scale, g.causal);
    f(cu_kernel(K::DkdvGeneric, t, g.D),
      jit::LaunchConfig{.grid = jit::grid_for(rows_k, 128), .block = 128}, q, k, v, dout, lse,
      delta, dk, dv, rows_k, int(g.Sq), int(g.Sk), int(g.D), g.scale, g.causal);
  }
}

// Note [Forward kernel choice]
// MHA_FLASH_ATTN_FWD_KERNEL=sm90 runs the wgmma forward (Note [Hopper forward] in
// flash_attn.cu; a compute capability 9.0 GPU only, its CUBIN is sm_90a), =sm90-serial the
// same without Note [Overlapped tiles] (for comparison), =mma the mma.sync forward and its
// tuned tiles (any GPU). Unset, the mma.sync forward runs on every GPU. The wgmma kernels
// passed their (gpu) case, memcheck, synccheck and racecheck on an H100, where at 1 x 16 x
// 16384 x 128 causal sm90 ran 470 TFLOP/s against the mma.sync forward's 356, and at
// head_dim 64 the two were within 4% either way (docs/results/2026-12-07-h100-flash-attn-
// wgmma.json). They stay opt-in until sm90 is a candidate of the autotuner's forward key
// (the row-tile knobs and the bench's forced columns force mma.sync variants, so a default
// that bypassed the tuner would make them measure sm90). Read at each call.
FwdKernel fwd_kernel_for(int device) {
  const char* e = std::getenv("MHA_FLASH_ATTN_FWD_KERNEL");
  const std::string v = e ? e : "";
  MT_CHECK(v.empty() || v == "sm90" || v == "sm90-serial" || v == "mma",
           "[mha::flash_attn] MHA_FLASH_ATTN_FWD_KERNEL='{}' must be sm90 or sm90-serial (the "
           "wgmma forwards, compute capability 9.0) or mma (the mma.sync forward); unset it for "
           "the default (mma)",
           v);
  if (v.empty() || v == "mma") return FwdKernel::Mma;
  const cuda::DeviceProps& p = cuda::device_props(device);
  MT_CHECK(p.major == 9 && p.minor == 0,
           "[mha::flash_attn] MHA_FLASH_ATTN_FWD_KERNEL={} takes a compute capability 9.0 GPU "
           "(H100, H200: wgmma exists on sm_90a only), but cuda:{} ({}) is {}.{}; set it to mma "
           "or unset it",
           v, device, p.name, p.major, p.minor);
  return v == "sm90" ? FwdKernel::Sm90 : FwdKernel::Sm90Serial;
}

auto launcher() {
  return [](const jit::UserKernel& k, const jit::LaunchConfig& c, const auto&... args) {
    k.launch(c, args...);
  };
}

std::tuple<Tensor, Tensor> forward_cuda_impl(const Tensor& q, const Tensor& k, const Tensor& v,
                                             bool causal, std::optional<double> scale,
                                             bool generic) {
  const Geometry g = check_inputs(q, k, v, causal, scale);
  MT_CHECK(generic || tensor_core_ok(q.dtype(), g.D),
           "[mha::flash_attn] the tensor-core kernels take float16 or bfloat16 with head_dim 64 "
           "or 128, got {} with head_dim {}",
           q.dtype(), g.D);
  const TensorOptions o{.dtype = q.dtype(), .device = q.device()};
  Tensor out = empty(q.sizes(), o);
  Tensor lse = empty(lse_shape(g), {.dtype = g.lse_dtype, .device = q.device()});
  if (g.Sq == 0 || g.B * g.H == 0) return {out, lse};
  const Tensor qc = prepared(q), kc = prepared(k), vc = prepared(v);
  if (generic) {
    with_forward(qc, kc, vc, out, lse, g, true, {}, FwdKernel::Mma, launcher());
    return {out, lse};
  }
  if (const FwdKernel fk = fwd_kernel_for(q.device().index); fk != FwdKernel::Mma) {
    with_forward(qc, kc, vc, out, lse, g, false, {}, fk, launcher());
    return {out, lse};
  }
  std::vector<jit::TuneCandidate> candidates;
  for (Variant var : fwd_variants())
    candidates.push_back({variant_name(false, var), [&, var] {
                            with_forward(qc, kc, vc, out, lse, g, false, var, FwdKernel::Mma,
                                         launcher());
                          }});
  jit::autotuner().run(tune_key(false, q.dtype(), g), candidates, q.device().index,
                       knob("MHA_FLASH_ATTN_FWD_ROW_TILES", "1", "2", "fwd_row_tiles="));
  return {out, lse};
}

std::tuple<Tensor, Tensor> forward_cuda(const Tensor& q, const Tensor& k, const Tensor& v,
                                        bool causal, std::optional<double> scale) {
  return forward_cuda_impl(q, k, v, causal, scale, !tensor_core_ok(q.dtype(), q.sizes()[3]));
}

std::tuple<Tensor, Tensor, Tensor> backward_cuda(const Tensor& grad_out, const Tensor& grad_lse,
                                                 const Tensor& q, const Tensor& k, const Tensor& v,
                                                 const Tensor& out, const Tensor& lse,
                                                 const Geometry& g, bool generic) {
  const TensorOptions o{.dtype = q.dtype(), .device = q.device()};
  const TensorOptions lo{.dtype = g.lse_dtype, .device = q.device()};
  Tensor dk = empty(k.sizes(), o), dv = empty(v.sizes(), o);
  if (g.Sq == 0 || g.B * g.H == 0)
    return {empty(q.sizes(), o), zeros(k.sizes(), o), zeros(v.sizes(), o)};
  Tensor dout = grad_out.defined() ? prepared(grad_out) : zeros(q.sizes(), o);
  Tensor glse =
      grad_lse.defined() ? grad_lse.to(g.lse_dtype).contiguous() : zeros(lse_shape(g), lo);
  Tensor delta = empty(lse_shape(g), lo);
  Tensor qc = prepared(q), kc = prepared(k), vc = prepared(v), oc = prepared(out),
         lc = lse.contiguous();
  with_backward_prep(oc, dout, glse, delta, g, q.dtype(), launcher());
  if (generic) {
    Tensor dq = empty(q.sizes(), o);
    with_backward_main(qc, kc, vc, dout, lc, delta, dq, dk, dv, g, true, {}, launcher());
    return {dq, dk, dv};
  }
  // dQ gathers float32 atomics from every key block, then takes q's dtype; each candidate
  // zeroes it first (the tuner runs several).
  Tensor dq = empty(q.sizes(), {.dtype = DType::Float32, .device = q.device()});
  std::vector<jit::TuneCandidate> candidates;
  for (Variant var : bwd_variants())
    candidates.push_back({variant_name(true, var), [&, var] {
                            dq.zero_();
                            with_backward_main(qc, kc, vc, dout, lc, delta, dq, dk, dv, g, false,
                                               var, launcher());
                          }});
  jit::autotuner().run(tune_key(true, q.dtype(), g), candidates, q.device().index,
                       knob("MHA_FLASH_ATTN_BWD_WARPS", "4", "8", "bwd_warps="));
  return {dq.to(q.dtype()), dk, dv};
}

std::tuple<Tensor, Tensor> forward_fake(const Tensor& q, const Tensor& k, const Tensor& v,
                                        bool causal, std::optional<double> scale) {
  const Geometry g = check_inputs(q, k, v, causal, scale);
  return {empty(q.sizes(), {.dtype = q.dtype(), .device = q.device()}),
          empty(lse_shape(g), {.dtype = g.lse_dtype, .device = q.device()})};
}

auto make_op() {
  auto op = custom_op(
      "mha::flash_attn", forward_cpu,
      {.schema = "(Tensor q, Tensor k, Tensor v, bool causal=False, float? scale=None) -> "
                 "(Tensor out, Tensor lse)"});
  op.register_kernel(DeviceType::CUDA, forward_cuda);
  op.register_fake(forward_fake);
  op.register_autograd(
      [](AutogradContext& ctx, const Tensor& grad_out, const Tensor& grad_lse) {
        const std::vector<Tensor> s = ctx.saved();
        const bool causal = std::any_cast<bool>(ctx.data.at("causal"));
        const auto scale = std::any_cast<std::optional<double>>(ctx.data.at("scale"));
        return flash_attn_backward(grad_out, grad_lse, s[0], s[1], s[2], s[3], s[4], causal, scale);
      },
      [](AutogradContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
         std::optional<double> scale, const std::tuple<Tensor, Tensor>& result) {
        ctx.save_for_backward({q, k, v, std::get<0>(result), std::get<1>(result)});
        ctx.data["causal"] = causal;
        ctx.data["scale"] = scale;
      });
  // Note [Attention FLOPs]
  // FlopCounterMode counts a call as PyTorch's flop counter counts sdpa: the two matmuls,
  // q k^T (2 B H Sq Sk D) and p v (2 B H Sq Sk Dv), so 4 B H Sq Sk D; causal or not (torch
  // ignores is_causal; bench.cpp's TFLOP/s halves it for causal, as FlashAttention's papers
  // do); the softmax and the scale are not counted. The backward runs inside the op's
  // autograd node, not as an op, so the mode sees none of it (torch counts its sdpa
  // backward op as 2.5 times the forward).
  register_flop_formula("mha::flash_attn", [](const Stack& args, const Stack&) -> int64_t {
    const Shape& q = args.at(0).to_tensor().sizes();
    const Shape& k = args.at(1).to_tensor().sizes();
    const Shape& v = args.at(2).to_tensor().sizes();
    return 2 * q[0] * q[1] * q[2] * k[2] * q[3] + 2 * q[0] * q[1] * q[2] * k[2] * v[3];
  });
  return op;
}

const auto& the_op() {
  static const auto op = make_op();
  return op;
}

}  // namespace

std::tuple<Tensor, Tensor> flash_attn(const Tensor& q, const Tensor& k, const Tensor& v,
                                      bool causal, std::optional<double> scale) {
  return the_op()(q, k, v, causal, scale);
}

const OperatorHandle& flash_attn_handle() { return the_op().handle(); }

std::tuple<Tensor, Tensor> flash_attn_cuda(const Tensor& q, const Tensor& k, const Tensor& v,
                                           bool causal, std::optional<double> scale, bool generic) {
  MT_CHECK(q.is_cuda(), "[mha::flash_attn] flash_attn_cuda takes CUDA tensors, got {}", q.device());
  return forward_cuda_impl(q, k, v, causal, scale, generic);
}

std::tuple<Tensor, Tensor, Tensor> flash_attn_backward(const Tensor& grad_out,
                                                       const Tensor& grad_lse, const Tensor& q,
                                                       const Tensor& k, const Tensor& v,
                                                       const Tensor& out, const Tensor& lse,
                                                       bool causal, std::optional<double> scale,
                                                       bool generic) {
  const Geometry g = check_inputs(q, k, v, causal, scale);
  if (!q.is_cuda()) return backward_cpu(grad_out, grad_lse, q, k, v, out, lse, g);
  return backward_cuda(grad_out, grad_lse, q, k, v, out, lse, g,
                       generic || !tensor_core_ok(q.dtype(), g.D));
}

FlashAttnTiles flash_attn_tiles(int D, int fwd_row_tiles, int bwd_warps) {
  // Note [Forward tiling] and Note [Backward tiling] in flash_attn.cu; the shared memory
  // sizes are the .cu's flash_attn_fwd_smem and flash_attn_bwd_smem (the test compares).
  // Which of the two of each the op runs: Note [Tuned tiles].
  MT_CHECK((fwd_row_tiles == 1 || fwd_row_tiles == 2) && (bwd_warps == 4 || bwd_warps == 8),
           "[mha::flash_attn] the kernels are compiled for 1 or 2 forward row tiles a warp and "
           "backward blocks of 4 or 8 warps, got {} and {}",
           fwd_row_tiles, bwd_warps);
  const int fwd_warps = 4, bwd_rows = D > 64 ? 32 : 64, bwd_keys = 16 * bwd_warps;
  const int fwd_rows = 16 * fwd_row_tiles * fwd_warps;
  // Q stays in shared memory when its fragments would not fit in registers (fa_fwd_q_in_regs).
  const int fwd_q_smem = D * fwd_row_tiles <= 128 ? 0 : fwd_rows * (D + 8) * 2;
  return {.fwd_rows = fwd_rows,
          .fwd_threads = 32 * fwd_warps,
          .fwd_smem = 4 * 64 * (D + 8) * 2 + fwd_q_smem,
          .bwd_rows = bwd_rows,
          .bwd_warps = bwd_warps,
          .bwd_smem =
              (2 * bwd_keys * (D + 8) + 4 * bwd_rows * (D + 8) + bwd_keys * (bwd_rows + 8)) * 2 +
              4 * bwd_rows * 4};
}

FlashAttnSm90Tiles flash_attn_sm90_tiles(int D, bool overlap) {
  // Note [Hopper forward] in flash_attn.cu: two warpgroups of 64 query rows, 128-key tiles;
  // two K tiles and two V tiles, three when overlapped (Note [Overlapped tiles]); the shared
  // memory is the .cu's flash_attn_fwd_sm90_smem (the test compares).
  MT_CHECK(D == 64 || D == 128,
           "[mha::flash_attn] the wgmma forward takes head_dim 64 or 128, got {}", D);
  const int warpgroups = 2, keys = 128, rows = 64 * warpgroups;
  return {.rows = rows,
          .threads = 128 * warpgroups,
          .keys = keys,
          .smem = 1024 + rows * D * 2 + (overlap ? 5 : 4) * keys * D * 2};
}

FlashAttnRegisters flash_attn_registers(DType t, int head_dim) {
  MT_CHECK(tensor_core_ok(t, head_dim),
           "[mha::flash_attn] the tensor-core kernels take float16 or bfloat16 and head dim 64 "
           "or 128, got {} and {}",
           t, head_dim);
  const cuda::DeviceProps& p = cuda::device_props(0);
  return {
      cu_kernel(K::Forward, t, head_dim).on(0).registers(),
      cu_kernel(K::Backward, t, head_dim).on(0).registers(),
      p.major == 9 && p.minor == 0 ? cu_kernel(K::ForwardSm90, t, head_dim).on(0).registers() : -1};
}

std::vector<jit::UserKernel> flash_attn_sm90_kernels() {
  std::vector<jit::UserKernel> all;
  for (DType t : {DType::Float16, DType::BFloat16})
    for (int64_t D : {64, 128})
      for (K which : {K::ForwardSm90, K::ForwardSm90Serial}) all.push_back(cu_kernel(which, t, D));
  return all;
}

std::vector<jit::UserKernel> flash_attn_kernels() {
  std::vector<jit::UserKernel> all;
  for (DType t : {DType::Float16, DType::BFloat16})
    for (int64_t D : {64, 128}) {
      for (Variant var : fwd_variants()) all.push_back(cu_kernel(K::Forward, t, D, var));
      for (Variant var : bwd_variants()) all.push_back(cu_kernel(K::Backward, t, D, var));
    }
  for (DType t : {DType::Float16, DType::BFloat16, DType::Float32, DType::Float64})
    for (K which : {K::Prep, K::ForwardGeneric, K::DqGeneric, K::DkdvGeneric})
      all.push_back(cu_kernel(which, t, 0));
  return all;
}

std::vector<std::string> flash_attn_candidates(bool backward) {
  std::vector<std::string> names;
  for (Variant var : backward ? bwd_variants() : fwd_variants())
    names.push_back(variant_name(backward, var));
  return names;
}

std::string flash_attn_tune_key(const Tensor& q, const Tensor& k, bool causal, bool backward) {
  return tune_key(backward, q.dtype(), check_inputs(q, k, k, causal, std::nullopt));
}

void flash_attn_check_launch(int arch, const Tensor& q, const Tensor& k, const Tensor& v,
                             bool causal, bool generic) {
  const Geometry g = check_inputs(q, k, v, causal, std::nullopt);
  auto check = [arch](const jit::UserKernel& kern, const jit::LaunchConfig&, const auto&... args) {
    kern.check_args(arch, args...);
  };
  Tensor out = empty_like(q), lse = empty(lse_shape(g), {.dtype = g.lse_dtype});
  Tensor dq = generic ? empty_like(q) : empty(q.sizes(), {.dtype = DType::Float32});
  Tensor delta = empty_like(lse);
  with_backward_prep(out, empty_like(q), empty_like(lse), delta, g, q.dtype(), check);
  // Every variant the tuner may pick (the generic kernels have one).
  for (size_t i = 0; i < (generic ? 1 : fwd_variants().size()); ++i)
    with_forward(q, k, v, out, lse, g, generic, fwd_variants()[i], FwdKernel::Mma, check);
  // The wgmma forward's CUBIN is sm_90a, for compute capability 9.0 only.
  if (!generic && arch == 90 && tensor_core_ok(q.dtype(), g.D))
    for (FwdKernel fk : {FwdKernel::Sm90, FwdKernel::Sm90Serial})
      with_forward(q, k, v, out, lse, g, false, {}, fk, check);
  for (size_t i = 0; i < (generic ? 1 : bwd_variants().size()); ++i)
    with_backward_main(q, k, v, empty_like(q), lse, delta, dq, empty_like(k), empty_like(v), g,
                       generic, bwd_variants()[i], check);
}

}  // namespace mha
