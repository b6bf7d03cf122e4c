// SPDX-License-Identifier: MIT
// deeprec::emb_agg, written the way a user writes a custom op: CPU loops, the CUDA kernels
// of emb_agg.cu launched through mt::jit::kernel, and the registrations.
#include "emb_agg.h"

#include <algorithm>
#include <any>
#include <cstdlib>
#include <limits>
#include <tuple>
#include <vector>

#include "emb_agg_cu.h"  // kEmbAggCu: emb_agg.cu's text (embed_cu.py)

#ifdef _OPENMP
#define DEEPREC_OMP_FOR _Pragma("omp parallel for schedule(dynamic, 64)")
#else
#define DEEPREC_OMP_FOR
#endif

using namespace mt;

namespace deeprec {
namespace {

struct Geometry {
  int64_t V = 0, D = 0, n_indices = 0, n_offsets = 0, n_bags = 0;
  bool mean = false, has_psw = false;
};

// The checks of shapes, dtypes, devices and mode that every kernel (CPU, CUDA, fake) makes.
Geometry check_inputs(const Tensor& weight, const Tensor& indices, const Tensor& offsets,
                      const std::string& mode, const std::optional<Tensor>& psw,
                      bool include_last_offset) {
  MT_CHECK(
      weight.dim() == 2 && (weight.dtype() == DType::Float32 || weight.dtype() == DType::Float64 ||
                            weight.dtype() == DType::BFloat16),
      "[deeprec::emb_agg] weight must be a 2-D [num_embeddings, dim] table of float32, "
      "float64 or bfloat16, got {} of shape {}",
      weight.dtype(), weight.sizes());
  MT_CHECK(indices.dim() == 1,
           "[deeprec::emb_agg] indices must be 1-D, with offsets marking where each bag starts; "
           "got shape {}. For a [B, L] batch of bags of L, pass indices.flatten() and offsets "
           "arange(0, B * L, L)",
           indices.sizes());
  MT_CHECK(indices.dtype() == DType::Int64,
           "[deeprec::emb_agg] indices must be int64, got {}; convert with "
           "indices.to(mt::DType::Int64)",
           indices.dtype());
  MT_CHECK(offsets.dim() == 1 && offsets.dtype() == DType::Int64,
           "[deeprec::emb_agg] offsets must be a 1-D int64 tensor, got {} of shape {}",
           offsets.dtype(), offsets.sizes());
  MT_CHECK(mode == "sum" || mode == "mean",
           "[deeprec::emb_agg] mode must be \"sum\" or \"mean\", got \"{}\"", mode);
  MT_CHECK(!include_last_offset || offsets.numel() >= 1,
           "[deeprec::emb_agg] include_last_offset needs at least one offset (the final one); "
           "offsets is empty");
  MT_CHECK(
      indices.device() == weight.device() && offsets.device() == weight.device(),
      "[deeprec::emb_agg] weight, indices and offsets must be on one device, got {}, {} and {}",
      weight.device(), indices.device(), offsets.device());
  const bool has_psw = psw.has_value() && psw->defined();
  if (has_psw) {
    MT_CHECK(mode == "sum",
             "[deeprec::emb_agg] per_sample_weights are only supported with mode \"sum\" (as in "
             "torch.nn.functional.embedding_bag), got mode \"{}\"",
             mode);
    MT_CHECK(psw->sizes() == indices.sizes() && psw->dtype() == weight.dtype() &&
                 psw->device() == weight.device(),
             "[deeprec::emb_agg] per_sample_weights must match indices' shape {} and weight's "
             "dtype {} and device {}, got {} {} on {}",
             indices.sizes(), weight.dtype(), weight.device(), psw->dtype(), psw->sizes(),
             psw->device());
  }
  constexpr int64_t kMaxInt = std::numeric_limits<int>::max();
  MT_CHECK(offsets.numel() < kMaxInt && weight.sizes()[1] < kMaxInt,
           "[deeprec::emb_agg] at most 2^31 - 1 bags and embedding dims, got {} offsets and "
           "dim {}",
           offsets.numel(), weight.sizes()[1]);
  Geometry g;
  g.V = weight.sizes()[0];
  g.D = weight.sizes()[1];
  g.n_indices = indices.numel();
  g.n_offsets = offsets.numel();
  g.n_bags = include_last_offset ? g.n_offsets - 1 : g.n_offsets;
  g.mean = mode == "mean";
  g.has_psw = has_psw;
  return g;
}

// Note [Index checks]
// Offsets must start at 0, never decrease and stay within indices; indices must be rows of
// weight. On CPU tensors the op checks every value before computing. On CUDA tensors that
// check would copy indices and offsets to the host (and wait for the GPU) on every call,
// so it runs only when DEEPREC_EMB_AGG_CHECK=1 is set; without it the kernels skip an
// out-of-range index (it adds nothing) and clamp bags to indices, so nothing is read out
// of bounds, but a wrong input gives a quietly wrong answer.
void check_values(const Tensor& indices, const Tensor& offsets, const Geometry& g) {
  const std::vector<int64_t> off = offsets.to_vector<int64_t>();
  if (!off.empty())
    MT_CHECK(off[0] == 0, "[deeprec::emb_agg] offsets[0] must be 0, got {}", off[0]);
  for (size_t b = 0; b < off.size(); ++b) {
    MT_CHECK(b == 0 || off[b] >= off[b - 1],
             "[deeprec::emb_agg] offsets must be sorted (non-decreasing): offsets[{}] = {} is "
             "less than offsets[{}] = {}",
             b, off[b], b - 1, b == 0 ? 0 : off[b - 1]);
    MT_CHECK(off[b] <= g.n_indices,
             "[deeprec::emb_agg] offsets[{}] = {} is past the end of indices ({} indices)", b,
             off[b], g.n_indices);
  }
  Tensor ic = indices.cpu().contiguous();
  const int64_t* idx = ic.data_ptr<int64_t>();
  for (int64_t i = 0; i < g.n_indices; ++i)
    MT_CHECK(idx[i] >= 0 && idx[i] < g.V,
             "[deeprec::emb_agg] indices[{}] = {} is out of range for a weight of {} rows "
             "(valid: 0 to {})",
             i, idx[i], g.V, g.V - 1);
}

bool cuda_checks_on() {
  const char* v = std::getenv("DEEPREC_EMB_AGG_CHECK");
  return v != nullptr && std::string(v) == "1";
}

// Bag b's [start, end) of indices.
inline std::pair<int64_t, int64_t> bag_of(const int64_t* off, int64_t b, const Geometry& g) {
  return {off[b], b + 1 < g.n_offsets ? off[b + 1] : g.n_indices};
}

// A bag's sum in A (float for bfloat16 weights, as on the GPU), stored as T.
template <typename T, typename A>
void forward_cpu_loop(const T* w, const int64_t* idx, const int64_t* off, const T* psw, T* out,
                      const Geometry& g) {
  DEEPREC_OMP_FOR
  for (int64_t b = 0; b < g.n_bags; ++b) {
    auto [start, end] = bag_of(off, b, g);
    std::vector<A> acc(size_t(g.D), A(0));
    for (int64_t i = start; i < end; ++i) {
      const A s = psw ? A(psw[i]) : A(1);
      const T* row = w + idx[i] * g.D;
      for (int64_t d = 0; d < g.D; ++d) acc[size_t(d)] += s * A(row[d]);
    }
    const A scale = g.mean && end > start ? A(1) / A(end - start) : A(1);
    T* o = out + b * g.D;
    for (int64_t d = 0; d < g.D; ++d) o[d] = T(acc[size_t(d)] * scale);
  }
}

Tensor psw_or_empty(const std::optional<Tensor>& psw) {
  return psw.has_value() && psw->defined() ? psw->contiguous() : Tensor();
}

Tensor forward_cpu(const Tensor& weight, const Tensor& indices, const Tensor& offsets,
                   const std::string& mode, const std::optional<Tensor>& psw,
                   bool include_last_offset, bool) {
  const Geometry g = check_inputs(weight, indices, offsets, mode, psw, include_last_offset);
  check_values(indices, offsets, g);
  Tensor wc = weight.contiguous(), ic = indices.contiguous(), oc = offsets.contiguous();
  Tensor pc = psw_or_empty(psw);
  Tensor out = empty({g.n_bags, g.D}, {.dtype = weight.dtype()});
  auto run = [&](auto* tag, auto acc_tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    forward_cpu_loop<T, decltype(acc_tag)>(
        wc.data_ptr<T>(), ic.data_ptr<int64_t>(), oc.data_ptr<int64_t>(),
        g.has_psw ? pc.data_ptr<T>() : nullptr, out.data_ptr<T>(), g);
  };
  if (weight.dtype() == DType::Float32)
    run(static_cast<float*>(nullptr), 0.0f);
  else if (weight.dtype() == DType::BFloat16)
    run(static_cast<BFloat16*>(nullptr), 0.0f);
  else
    run(static_cast<double*>(nullptr), 0.0);
  return out;
}

// The gradients on the CPU: grad_weight by a serial scatter-add over bags (exact and
// deterministic), grad_psw by a dot a sample. bfloat16 is computed in float32 and rounded
// once at the end (float accumulation, as on the GPU).
std::tuple<Tensor, Tensor> backward_cpu(const Tensor& grad, const Tensor& weight,
                                        const Tensor& indices, const Tensor& offsets,
                                        const Tensor& psw, const Geometry& g, bool want_weight,
                                        bool want_psw) {
  if (weight.dtype() == DType::BFloat16) {
    const DType f = DType::Float32;
    auto [gw, gp] = backward_cpu(grad.to(f), weight.to(f), indices, offsets,
                                 psw.defined() ? psw.to(f) : psw, g, want_weight, want_psw);
    return {gw.defined() ? gw.to(DType::BFloat16) : gw, gp.defined() ? gp.to(DType::BFloat16) : gp};
  }
  Tensor gc = grad.contiguous(), wc = weight.contiguous(), ic = indices.contiguous(),
         oc = offsets.contiguous();
  Tensor gw, gp;
  auto run = [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const T* gr = gc.data_ptr<T>();
    const int64_t *idx = ic.data_ptr<int64_t>(), *off = oc.data_ptr<int64_t>();
    const T* ps = g.has_psw ? psw.contiguous().data_ptr<T>() : nullptr;
    if (want_weight) {
      gw = zeros({g.V, g.D}, {.dtype = weight.dtype()});
      T* o = gw.data_ptr<T>();
      for (int64_t b = 0; b < g.n_bags; ++b) {
        auto [start, end] = bag_of(off, b, g);
        const T scale = g.mean && end > start ? T(1) / T(end - start) : T(1);
        for (int64_t i = start; i < end; ++i) {
          const T s = (ps ? ps[i] : T(1)) * scale;
          for (int64_t d = 0; d < g.D; ++d) o[idx[i] * g.D + d] += s * gr[b * g.D + d];
        }
      }
    }
    if (want_psw) {
      gp = zeros({g.n_indices}, {.dtype = weight.dtype()});
      T* o = gp.data_ptr<T>();
      const T* w = wc.data_ptr<T>();
      DEEPREC_OMP_FOR
      for (int64_t b = 0; b < g.n_bags; ++b) {
        auto [start, end] = bag_of(off, b, g);
        for (int64_t i = start; i < end; ++i) {
          T s = 0;
          for (int64_t d = 0; d < g.D; ++d) s += gr[b * g.D + d] * w[idx[i] * g.D + d];
          o[i] = s;
        }
      }
    }
  };
  if (weight.dtype() == DType::Float32)
    run(static_cast<float*>(nullptr));
  else
    run(static_cast<double*>(nullptr));
  return {gw, gp};
}

// ------------------------------------------------------------------------------- CUDA

constexpr unsigned kBlock = 256, kBagsPerBlock = kBlock / 32;  // a warp a bag

jit::LaunchConfig bag_config(const Geometry& g) {
  return {.grid = jit::grid_for(std::max<int64_t>(g.n_bags, 1), kBagsPerBlock), .block = kBlock};
}

bool vec4_ok(const Tensor& weight, const Geometry& g) {
  // 16-byte (float), 32-byte (double) or 8-byte (bfloat16) rows: D a multiple of 4 and the
  // table's start aligned (allocations are; a view may not be).
  return g.D % 4 == 0 && weight.storage_offset() % 4 == 0;
}

// Each launch of the op, handed to f(kernel, config, args...): the launch and the
// GPU-less argument check run the same code. A missing per_sample_weights is passed as
// weight with has_psw = 0 (a launch takes Tensors, not null pointers).
template <typename F>
void with_forward(const Tensor& w, const Tensor& idx, const Tensor& off, const Tensor& psw,
                  const Tensor& out, const Geometry& g, F&& f) {
  const auto& k =
      emb_agg_kernel(w.dtype(), vec4_ok(w, g) ? EmbAggKernel::ForwardVec4 : EmbAggKernel::Forward);
  f(k, bag_config(g), w, idx, off, g.has_psw ? psw : w, out, int(g.n_bags), int(g.n_offsets),
    int(g.D), (long long)g.n_indices, (long long)g.V, int(g.mean), int(g.has_psw));
}
template <typename F>
void with_backward_weight(const Tensor& grad, const Tensor& idx, const Tensor& off,
                          const Tensor& psw, const Tensor& gw, const Geometry& g, F&& f) {
  const EmbAggKernel which =
      vec4_ok(grad, g) ? EmbAggKernel::BackwardWeightVec4 : EmbAggKernel::BackwardWeight;
  f(emb_agg_kernel(grad.dtype(), which), bag_config(g), grad, idx, off, g.has_psw ? psw : grad, gw,
    int(g.n_bags), int(g.n_offsets), int(g.D), (long long)g.n_indices, (long long)g.V, int(g.mean),
    int(g.has_psw));
}
template <typename F>
void with_backward_psw(const Tensor& grad, const Tensor& w, const Tensor& idx, const Tensor& off,
                       const Tensor& gp, const Geometry& g, F&& f) {
  f(emb_agg_kernel(grad.dtype(), EmbAggKernel::BackwardPsw), bag_config(g), grad, w, idx, off, gp,
    int(g.n_bags), int(g.n_offsets), int(g.D), (long long)g.n_indices, (long long)g.V);
}

constexpr int64_t kSortTile = 1024, kSortBins = 256;  // emb_agg.cu's kEmbSortTile, kEmbSortBins

// The sorted-segment weight gradient (Note [Sorted-segment backward] in emb_agg.cu) into
// gw ([V, D], every row written): its temporaries come from `make(shape, fill)` (fill < 0:
// uninitialized), so the GPU-less check can hand CPU tensors.
template <typename F, typename Make>
void with_backward_segment(const Tensor& grad, const Tensor& idx, const Tensor& off,
                           const Tensor& psw, const Tensor& gw, const Geometry& g, F&& f,
                           Make&& make) {
  using K = EmbAggKernel;
  const DType t = grad.dtype();
  const long long n = g.n_indices, V = g.V;
  Tensor keys = make(n, double(V)), vals = make(n, -1.0), bag = make(n, -1.0);
  f(emb_agg_kernel(t, K::SegInit), bag_config(g), idx, off, keys, vals, bag, int(g.n_bags),
    int(g.n_offsets), n, V);
  int passes = 0;  // 8-bit digits of the keys, 0 to V
  for (long long v = V; v > 0; v >>= 8) ++passes;
  const long long tiles = (n + kSortTile - 1) / kSortTile;
  MT_CHECK(tiles < std::numeric_limits<int>::max() / kSortBins,
           "[deeprec::emb_agg] the deterministic backward sorts at most 2^31 / 256 tiles of "
           "1024 indices, got {} indices",
           n);
  Tensor hist = make(tiles * kSortBins, -1.0), totals = make(kSortBins, -1.0),
         keys2 = make(n, -1.0), vals2 = make(n, -1.0);
  for (int p = 0; p < passes; ++p) {
    const int shift = 8 * p;
    f(emb_agg_kernel(t, K::SortHist), jit::LaunchConfig{.grid = unsigned(tiles), .block = 256},
      keys, n, shift, hist, int(tiles));
    f(emb_agg_kernel(t, K::SortScan),
      jit::LaunchConfig{.grid = unsigned(kSortBins), .block = tiles >= 256 ? 256u : 32u}, hist,
      int(tiles), totals);
    f(emb_agg_kernel(t, K::SortScatter), jit::LaunchConfig{.grid = unsigned(tiles), .block = 32},
      keys, vals, keys2, vals2, n, shift, hist, totals, int(tiles));
    std::swap(keys, keys2);
    std::swap(vals, vals2);
  }
  Tensor seg_start = make(V + 1, -1.0);
  f(emb_agg_kernel(t, K::SegStarts), jit::LaunchConfig{.grid = jit::grid_for(V + 1)}, keys, n, V,
    seg_start);
  f(emb_agg_kernel(t, vec4_ok(grad, g) ? K::SegReduceVec4 : K::SegReduce),
    jit::LaunchConfig{.grid = jit::grid_for(V, kBagsPerBlock), .block = kBlock}, grad, off,
    g.has_psw ? psw : grad, vals, bag, seg_start, gw, int(g.n_offsets), int(g.D), n, V, int(g.mean),
    int(g.has_psw));
}

auto launcher() {
  return [](const jit::UserKernel& k, const jit::LaunchConfig& c, const auto&... args) {
    k.launch(c, args...);
  };
}

Tensor forward_cuda(const Tensor& weight, const Tensor& indices, const Tensor& offsets,
                    const std::string& mode, const std::optional<Tensor>& psw,
                    bool include_last_offset, bool) {
  const Geometry g = check_inputs(weight, indices, offsets, mode, psw, include_last_offset);
  if (cuda_checks_on()) check_values(indices, offsets, g);
  Tensor wc = weight.contiguous(), ic = indices.contiguous(), oc = offsets.contiguous();
  Tensor out = empty({g.n_bags, g.D}, {.dtype = weight.dtype(), .device = weight.device()});
  if (g.n_bags == 0 || g.D == 0) return out;
  with_forward(wc, ic, oc, psw_or_empty(psw), out, g, launcher());
  return out;
}

// Note [Which weight gradient]
// By atomics (emb_agg_backward_weight: zero-fill the [V, D] gradient, then each bag adds
// its rows; fast, but float addition order varies between runs) unless `deterministic` is
// set: then the sorted-segment path, whose result is the same bits on every run. bfloat16
// weights always take the sorted-segment path: it sums in float in registers and writes
// bfloat16 once, where atomics on bfloat16 would round at every add and lose the float
// accumulation. (Float atomics into a [V, D] float32 temporary, converted at the end, are
// the other way; on the H200 the segment path took 0.347 ms at V = 1e6, D = 128, about
// what the float32 atomics plus a conversion pass cost, so that one was not kept.)
std::tuple<Tensor, Tensor> backward_cuda(const Tensor& grad, const Tensor& weight,
                                         const Tensor& indices, const Tensor& offsets,
                                         const Tensor& psw, const Geometry& g, bool want_weight,
                                         bool want_psw, bool deterministic) {
  Tensor gc = grad.contiguous(), ic = indices.contiguous(), oc = offsets.contiguous();
  Tensor pc = g.has_psw ? psw.contiguous() : Tensor();
  Tensor gw, gp;
  const bool work = g.n_bags > 0 && g.D > 0;
  const TensorOptions opts{.dtype = weight.dtype(), .device = weight.device()};
  if (want_weight) {
    if (!work || g.V == 0 || g.n_indices == 0) {
      gw = zeros({g.V, g.D}, opts);
    } else if (deterministic || weight.dtype() == DType::BFloat16) {
      gw = empty({g.V, g.D}, opts);
      with_backward_segment(gc, ic, oc, pc, gw, g, launcher(), [&](int64_t n, double fill) {
        const TensorOptions io{.dtype = DType::Int64, .device = weight.device()};
        return fill >= 0 ? full({n}, fill, io) : empty({n}, io);
      });
    } else {
      gw = zeros({g.V, g.D}, opts);
      with_backward_weight(gc, ic, oc, pc, gw, g, launcher());
    }
  }
  if (want_psw) {
    gp = zeros({g.n_indices}, opts);
    if (work) with_backward_psw(gc, weight.contiguous(), ic, oc, gp, g, launcher());
  }
  return {gw, gp};
}

Tensor forward_fake(const Tensor& weight, const Tensor& indices, const Tensor& offsets,
                    const std::string& mode, const std::optional<Tensor>& psw,
                    bool include_last_offset, bool) {
  const Geometry g = check_inputs(weight, indices, offsets, mode, psw, include_last_offset);
  return empty({g.n_bags, g.D}, {.dtype = weight.dtype(), .device = weight.device()});
}

auto make_op() {
  auto op =
      custom_op("deeprec::emb_agg", forward_cpu,
                {.schema = "(Tensor weight, Tensor indices, Tensor offsets, str mode=\"sum\", "
                           "Tensor? per_sample_weights=None, bool include_last_offset=False, "
                           "bool deterministic=False) -> Tensor"});
  op.register_kernel(DeviceType::CUDA, forward_cuda);
  op.register_fake(forward_fake);
  op.register_autograd(
      [](AutogradContext& ctx, const Tensor& grad) {
        const std::vector<Tensor> s = ctx.saved();
        const Tensor& weight = s[0];
        const Tensor& psw = s.size() > 3 ? s[3] : Tensor();
        const bool include_last = std::any_cast<bool>(ctx.data.at("include_last_offset"));
        const Geometry g =
            check_inputs(weight, s[1], s[2], std::any_cast<std::string>(ctx.data.at("mode")),
                         psw.defined() ? std::optional<Tensor>(psw) : std::nullopt, include_last);
        const bool want_w = ctx.needs_input_grad(0), want_p = g.has_psw && ctx.needs_input_grad(3);
        const bool det = std::any_cast<bool>(ctx.data.at("deterministic"));
        auto [gw, gp] = grad.is_cuda()
                            ? backward_cuda(grad, weight, s[1], s[2], psw, g, want_w, want_p, det)
                            : backward_cpu(grad, weight, s[1], s[2], psw, g, want_w, want_p);
        return std::tuple<Tensor, Tensor, Tensor, Tensor>{gw, Tensor(), Tensor(), gp};
      },
      [](AutogradContext& ctx, const Tensor& weight, const Tensor& indices, const Tensor& offsets,
         const std::string& mode, const std::optional<Tensor>& psw, bool include_last_offset,
         bool deterministic, const Tensor&) {
        if (psw.has_value() && psw->defined())
          ctx.save_for_backward({weight, indices, offsets, *psw});
        else
          ctx.save_for_backward({weight, indices, offsets});
        ctx.data["mode"] = mode;
        ctx.data["include_last_offset"] = include_last_offset;
        ctx.data["deterministic"] = deterministic;
      });
  return op;
}

const auto& the_op() {
  static const auto op = make_op();
  return op;
}

}  // namespace

Tensor emb_agg(const Tensor& weight, const Tensor& indices, const Tensor& offsets,
               const std::string& mode, const std::optional<Tensor>& per_sample_weights,
               bool include_last_offset, bool deterministic) {
  return the_op()(weight, indices, offsets, mode, per_sample_weights, include_last_offset,
                  deterministic);
}

const OperatorHandle& emb_agg_handle() { return the_op().handle(); }

const jit::UserKernel& emb_agg_kernel(DType dtype, EmbAggKernel which) {
  using K = EmbAggKernel;
  MT_CHECK(
      dtype != DType::BFloat16 || (which != K::BackwardWeight && which != K::BackwardWeightVec4),
      "[deeprec::emb_agg] the atomic weight gradient has no bfloat16 kernel; bfloat16 takes "
      "the sorted-segment one");
  auto make = [](const std::string& name) { return jit::kernel(kEmbAggCu, name); };
  // Per dtype (float, double, bfloat16), in EmbAggKernel's order up to SegInit; the sort's
  // kernels do not depend on it.
  auto typed = [&](const char* t) {
    const std::string T = t;
    return std::vector<jit::UserKernel>{
        make("emb_agg_forward<" + T + ", 1>"),
        make("emb_agg_forward<" + T + ", 4>"),
        make("emb_agg_backward_weight<" + (T == "mt::BFloat16" ? "float" : T) + ", 1>"),
        make("emb_agg_backward_weight<" + (T == "mt::BFloat16" ? "float" : T) + ", 4>"),
        make("emb_agg_backward_psw<" + T + ">"),
        make("emb_seg_reduce<" + T + ", 1>"),
        make("emb_seg_reduce<" + T + ", 4>")};
  };
  static const std::vector<jit::UserKernel> per_type[3] = {typed("float"), typed("double"),
                                                           typed("mt::BFloat16")};
  static const jit::UserKernel sort[5] = {make("emb_seg_init"), make("emb_sort_hist"),
                                          make("emb_sort_scan"), make("emb_sort_scatter"),
                                          make("emb_seg_starts")};
  const int t = dtype == DType::Float64 ? 1 : dtype == DType::BFloat16 ? 2 : 0;
  switch (which) {
    case K::SegReduce:
      return per_type[t][5];
    case K::SegReduceVec4:
      return per_type[t][6];
    case K::SegInit:
      return sort[0];
    case K::SortHist:
      return sort[1];
    case K::SortScan:
      return sort[2];
    case K::SortScatter:
      return sort[3];
    case K::SegStarts:
      return sort[4];
    default:
      return per_type[t][int(which)];
  }
}

void emb_agg_check_launch(int arch, const Tensor& weight, const Tensor& indices,
                          const Tensor& offsets, const std::string& mode,
                          const std::optional<Tensor>& psw, bool include_last_offset) {
  const Geometry g = check_inputs(weight, indices, offsets, mode, psw, include_last_offset);
  MT_CHECK(g.V > 0 && g.n_indices > 0, "[deeprec::emb_agg] check_launch needs rows and indices");
  auto check = [arch](const jit::UserKernel& k, const jit::LaunchConfig&, const auto&... args) {
    k.check_args(arch, args...);
  };
  Tensor p = psw_or_empty(psw);
  Tensor out = empty({g.n_bags, g.D}, {.dtype = weight.dtype()});
  with_forward(weight, indices, offsets, p, out, g, check);
  if (weight.dtype() != DType::BFloat16)
    with_backward_weight(out, indices, offsets, p, empty_like(weight), g, check);
  with_backward_segment(out, indices, offsets, p, empty_like(weight), g, check,
                        [](int64_t n, double) { return empty({n}, {.dtype = DType::Int64}); });
  with_backward_psw(out, weight, indices, offsets, empty({g.n_indices}, {.dtype = weight.dtype()}),
                    g, check);
}

std::vector<std::pair<std::string, double>> emb_agg_segment_profile(const Tensor& weight,
                                                                    const Tensor& indices,
                                                                    const Tensor& offsets,
                                                                    const Tensor& grad) {
  const Geometry g = check_inputs(weight, indices, offsets, "sum", std::nullopt, false);
  MT_CHECK(weight.is_cuda() && grad.is_cuda() && grad.dtype() == weight.dtype() &&
               grad.sizes() == Shape({g.n_bags, g.D}) && g.V > 0 && g.n_indices > 0,
           "[deeprec::emb_agg] segment_profile takes CUDA tensors, rows, indices and a grad of "
           "[bags, dim] in weight's dtype");
  std::vector<std::pair<std::string, double>> out;
  cuda::EventTimer timer(weight.device().index);
  Tensor gw = empty({g.V, g.D}, {.dtype = weight.dtype(), .device = weight.device()});
  with_backward_segment(
      grad.contiguous(), indices.contiguous(), offsets.contiguous(), Tensor(), gw, g,
      [&](const jit::UserKernel& k, const jit::LaunchConfig& c, const auto&... args) {
        timer.start();
        k.launch(c, args...);
        timer.stop();
        out.emplace_back(k.name_expression(), double(timer.elapsed_ms()));
      },
      [&](int64_t n, double fill) {
        const TensorOptions io{.dtype = DType::Int64, .device = weight.device()};
        return fill >= 0 ? full({n}, fill, io) : empty({n}, io);
      });
  return out;
}

}  // namespace deeprec
