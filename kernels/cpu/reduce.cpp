// SPDX-License-Identifier: MIT
// Reductions on the CPU: sum, mean, max (with indices) over any set of dims, and sum_to.
//
// Note [Reduction plan]
// x's dims split into kept ones (the output's) and reduced ones; each group drops its
// size-1 dims and merges neighbours that are one strided dim. Two layouts follow:
//  - rows: the reduced elements of one output are read along the innermost reduced
//    dim (sum over the last dim, or over everything). Runs are summed pairwise, runs
//    combine pairwise (Cascade), and the reduced index space is cut into fixed chunks
//    of kChunk elements whose partials combine pairwise too, so big reductions use
//    every thread even with one output.
//  - columns: the reduced dims are outer and the innermost kept dim is contiguous (sum
//    over dim 0 of [N, M]). Then a tile of up to kTile outputs accumulates whole rows
//    at a time, which vectorizes, pairwise over the rows.
// Chunks and tiles depend on the shapes only, never on the thread count, so results
// are the same with 1 or N threads.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/loops.h"
#include "runtime/view.h"

namespace mt::cpu {
namespace {

constexpr int64_t kChunk = 32768;   // reduced elements per task in the row layout
constexpr int64_t kTile = 256;      // outputs per task in the column layout
constexpr int64_t kPairBase = 256;  // pairwise sums below this length are a plain loop

template <typename T>
struct AccOf {
  using type = float;
};  // float32, float16, bfloat16
template <>
struct AccOf<double> {
  using type = double;
};
template <>
struct AccOf<int64_t> {
  using type = int64_t;
};
template <>
struct AccOf<bool> {
  using type = int64_t;
};

enum class Kind { Sum, Mean, Max };

struct Plan {
  int nk = 0, nr = 0;
  int64_t ksize[kMaxDims] = {}, kx[kMaxDims] = {}, ko[kMaxDims] = {}, ki[kMaxDims] = {};
  int64_t rsize[kMaxDims] = {}, rx[kMaxDims] = {};  // strides in elements
  int64_t n_out = 1, n_red = 1;
};

// ostr / istr: strides of out / indices in keepdim form (one per dim of x).
Plan make_plan(const Tensor& x, const bool* reduced, const int64_t* ostr, const int64_t* istr) {
  Plan p;
  for (int64_t d = 0; d < x.dim(); ++d) {
    int64_t s = x.size(d);
    // every shape is checked where it is made (Note [Checked shapes]); a negative size here
    // would divide by zero below
    MT_ASSERT(s >= 0, "a reduction got a tensor of shape {}", x.sizes());
    if (reduced[d])
      p.n_red *= s;
    else
      p.n_out *= s;
    if (s == 1) continue;
    if (reduced[d]) {
      if (p.nr > 0 && p.rx[p.nr - 1] == s * x.stride(d)) {
        p.rsize[p.nr - 1] *= s;
        p.rx[p.nr - 1] = x.stride(d);
      } else {
        p.rsize[p.nr] = s;
        p.rx[p.nr++] = x.stride(d);
      }
    } else {
      int k = p.nk - 1;
      if (k >= 0 && p.kx[k] == s * x.stride(d) && p.ko[k] == s * ostr[d] &&
          p.ki[k] == s * istr[d]) {
        p.ksize[k] *= s;
        p.kx[k] = x.stride(d), p.ko[k] = ostr[d], p.ki[k] = istr[d];
      } else {
        p.ksize[p.nk] = s;
        p.kx[p.nk] = x.stride(d), p.ko[p.nk] = ostr[d], p.ki[p.nk] = istr[d];
        ++p.nk;
      }
    }
  }
  if (p.nr == 0) p.nr = 1, p.rsize[0] = 1, p.rx[0] = 0;  // one element per output
  return p;
}

// Offsets (in elements) of output j in x, out and indices.
void kept_offsets(const Plan& p, int64_t j, int64_t* xo, int64_t* oo, int64_t* io) {
  *xo = *oo = *io = 0;
  for (int d = p.nk - 1; d >= 0; --d) {
    int64_t i = j % p.ksize[d];
    j /= p.ksize[d];
    *xo += i * p.kx[d], *oo += i * p.ko[d], *io += i * p.ki[d];
  }
}

// Offset in x of reduced element r (row-major over the reduced dims).
int64_t reduced_offset(const Plan& p, int64_t r) {
  int64_t off = 0;
  for (int d = p.nr - 1; d >= 0; --d) {
    off += (r % p.rsize[d]) * p.rx[d];
    r /= p.rsize[d];
  }
  return off;
}

// Calls f(offset, n, first) for the runs of the innermost reduced dim that cover the
// reduced elements [b, e); `first` is the linear index of the run's first element.
template <typename F>
void for_each_run(const Plan& p, int64_t b, int64_t e, F&& f) {
  const int nr = p.nr;
  int64_t idx[kMaxDims];
  int64_t rem = b, off = 0;
  for (int d = nr - 1; d >= 0; --d) {
    idx[d] = rem % p.rsize[d];
    rem /= p.rsize[d];
    off += idx[d] * p.rx[d];
  }
  const int64_t inner = p.rsize[nr - 1];
  while (b < e) {
    int64_t n = std::min(inner - idx[nr - 1], e - b);
    f(off, n, b);
    b += n;
    if (b >= e) break;
    off -= idx[nr - 1] * p.rx[nr - 1];
    idx[nr - 1] = 0;
    for (int d = nr - 2; d >= 0; --d) {
      if (++idx[d] < p.rsize[d]) {
        off += p.rx[d];
        break;
      }
      off -= (p.rsize[d] - 1) * p.rx[d];
      idx[d] = 0;
    }
  }
}

template <typename T, typename Acc>
Acc pairwise_sum(const T* x, int64_t n, int64_t s) {
  if (n <= kPairBase) {
    Acc acc = 0;
    if (s == 1) {
      MT_SIMD_SUM(acc) for (int64_t i = 0; i < n; ++i) acc += Acc(x[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) acc += Acc(x[i * s]);
    }
    return acc;
  }
  int64_t h = n / 2;
  return pairwise_sum<T, Acc>(x, h, s) + pairwise_sum<T, Acc>(x + h * s, n - h, s);
}

// Pairwise combination of a stream of partial sums: equal-weight neighbours merge, like
// a binary counter, so the error grows with the log of the count.
template <typename Acc>
struct Cascade {
  Acc v[64];
  int64_t w[64];
  int top = 0;
  void push(Acc x) {
    v[top] = x, w[top] = 1, ++top;
    while (top >= 2 && w[top - 1] == w[top - 2]) {
      v[top - 2] += v[top - 1], w[top - 2] += w[top - 1];
      --top;
    }
  }
  Acc result() const {
    Acc s = 0;
    for (int i = top - 1; i >= 0; --i) s += v[i];
    return s;
  }
};

// parts[i * w .. i * w + w) for i < n, summed pairwise into parts[0 .. w).
template <typename Acc>
void tree_sum(Acc* parts, int64_t n, int64_t w) {
  for (int64_t step = 1; step < n; step *= 2)
    for (int64_t i = 0; i + step < n; i += 2 * step) {
      Acc* d = parts + i * w;
      const Acc* s = parts + (i + step) * w;
      MT_SIMD for (int64_t j = 0; j < w; ++j) d[j] += s[j];
    }
}

// Where results go: out's data, element size and dtype.
struct Dest {
  char* data;
  int64_t elem_size;
  DType dtype;
  explicit Dest(const Tensor& t)
      : data(static_cast<char*>(t.data_ptr())),
        elem_size(int64_t(t.element_size())),
        dtype(t.dtype()) {}
};

template <typename Acc>
void store(const Dest& out, int64_t offset, Acc v) {
  char* p = out.data + offset * out.elem_size;
  if (out.dtype == dtype_v<Acc>)
    *reinterpret_cast<Acc*>(p) = v;
  else
    store_row<Acc>(out.dtype, p, 0, 1, &v);
}

template <typename Acc>
Acc finish(Kind kind, Acc v, int64_t n_red) {
  if (kind == Kind::Mean) return Acc(v / Acc(n_red));  // 0 / 0 = NaN for an empty mean
  return v;
}

// Sums rows [r0, r1) of a tile of w columns into dst, pairwise over the rows.
template <typename T, typename Acc>
void column_sum(const T* x, const Plan& p, int64_t r0, int64_t r1, int64_t w, Acc* dst) {
  if (r1 - r0 <= 8) {
    std::fill(dst, dst + w, Acc(0));
    for (int64_t r = r0; r < r1; ++r) {
      const T* row = x + reduced_offset(p, r);
      MT_SIMD for (int64_t j = 0; j < w; ++j) dst[j] += Acc(row[j]);
    }
    return;
  }
  int64_t mid = r0 + (r1 - r0) / 2;
  column_sum<T, Acc>(x, p, r0, mid, w, dst);
  Acc tmp[kTile];
  column_sum<T, Acc>(x, p, mid, r1, w, tmp);
  MT_SIMD for (int64_t j = 0; j < w; ++j) dst[j] += tmp[j];
}

bool use_columns(const Plan& p) {
  return p.nk >= 1 && p.kx[p.nk - 1] == 1 && p.ksize[p.nk - 1] >= 16 && p.rx[p.nr - 1] != 1 &&
         p.n_red > 1;
}

template <typename T>
void sum_kernel(Kind kind, const T* x, const Plan& p, const Dest& out) {
  using Acc = typename AccOf<T>::type;
  if (use_columns(p)) {
    const int64_t W = p.ksize[p.nk - 1], tiles = (W + kTile - 1) / kTile;
    const int64_t tasks = (p.n_out / W) * tiles, tw = std::min(W, kTile);
    // Few tiles: cut the rows into at most 64 chunks too, so that threads have work.
    int64_t rows_per = p.n_red;
    if (tasks < 16) rows_per = std::max({int64_t(16), kChunk / tw, (p.n_red + 63) / 64});
    const int64_t rchunks = (p.n_red + rows_per - 1) / rows_per;
    std::vector<Acc> parts(size_t(rchunks > 1 ? tasks * rchunks * kTile : 0));
    auto tile_of = [&](int64_t task, int64_t* xo, int64_t* oo, int64_t* w) {
      int64_t tile = task % tiles, o = task / tiles, io;
      kept_offsets(p, o * W + tile * kTile, xo, oo, &io);
      *w = std::min(kTile, W - tile * kTile);
    };
    const int64_t os = p.ko[p.nk - 1];
    const int64_t work = tw * std::min(p.n_red, rows_per);
    parallel_for(tasks * rchunks, std::max<int64_t>(1, kGrainSize / work),
                 [&](int64_t b, int64_t e) {
                   Acc dst[kTile];
                   for (int64_t t = b; t < e; ++t) {
                     int64_t task = t / rchunks, rc = t % rchunks, xo, oo, w;
                     tile_of(task, &xo, &oo, &w);
                     int64_t r0 = rc * rows_per, r1 = std::min(p.n_red, r0 + rows_per);
                     Acc* d = rchunks > 1 ? parts.data() + t * kTile : dst;
                     column_sum<T, Acc>(x + xo, p, r0, r1, w, d);
                     if (rchunks == 1)
                       for (int64_t j = 0; j < w; ++j)
                         store(out, oo + j * os, finish(kind, d[j], p.n_red));
                   }
                 });
    if (rchunks == 1) return;
    parallel_for(tasks, 1, [&](int64_t b, int64_t e) {
      for (int64_t task = b; task < e; ++task) {
        Acc* part = parts.data() + task * rchunks * kTile;
        tree_sum(part, rchunks, kTile);
        int64_t xo, oo, w;
        tile_of(task, &xo, &oo, &w);
        for (int64_t j = 0; j < w; ++j) store(out, oo + j * os, finish(kind, part[j], p.n_red));
      }
    });
    return;
  }
  const int64_t chunks = (p.n_red + kChunk - 1) / kChunk;
  const int64_t rs = p.rx[p.nr - 1];
  std::vector<Acc> parts(size_t(chunks > 1 ? p.n_out * chunks : 0));
  const int64_t grain = std::max<int64_t>(1, kGrainSize / std::min(p.n_red, kChunk));
  parallel_for(p.n_out * chunks, grain, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      int64_t j = t / chunks, c = t % chunks;
      int64_t xo, oo, io;
      kept_offsets(p, j, &xo, &oo, &io);
      Cascade<Acc> acc;
      for_each_run(p, c * kChunk, std::min(p.n_red, (c + 1) * kChunk),
                   [&](int64_t off, int64_t n, int64_t) {
                     acc.push(pairwise_sum<T, Acc>(x + xo + off, n, rs));
                   });
      if (chunks == 1)
        store(out, oo, finish(kind, acc.result(), p.n_red));
      else
        parts[size_t(t)] = acc.result();
    }
  });
  if (chunks == 1) return;
  parallel_for(p.n_out, std::max<int64_t>(1, kGrainSize / chunks), [&](int64_t b, int64_t e) {
    for (int64_t j = b; j < e; ++j) {
      tree_sum(parts.data() + j * chunks, chunks, 1);
      int64_t xo, oo, io;
      kept_offsets(p, j, &xo, &oo, &io);
      store(out, oo, finish(kind, parts[size_t(j * chunks)], p.n_red));
    }
  });
}

template <typename V>
bool is_nan(V v) {
  return v != v;
}

// Whether v replaces best: larger, or the first NaN (NaN propagates; ties keep the first).
template <typename V>
bool better(V v, V best) {
  return v > best || (is_nan(v) && !is_nan(best));
}

template <typename T>
void max_kernel(const T* x, const Plan& p, const Dest& out, const Tensor& indices) {
  using V = typename AccOf<T>::type;
  int64_t* ip = indices.defined() ? indices.data_ptr<int64_t>() : nullptr;
  if (use_columns(p)) {
    const int64_t W = p.ksize[p.nk - 1], tiles = (W + kTile - 1) / kTile;
    const int64_t tasks = (p.n_out / W) * tiles;
    const int64_t work = std::min(W, kTile) * p.n_red;
    parallel_for(tasks, std::max<int64_t>(1, kGrainSize / work), [&](int64_t b, int64_t e) {
      V best[kTile];
      int64_t at[kTile];
      for (int64_t task = b; task < e; ++task) {
        int64_t tile = task % tiles, o = task / tiles;
        int64_t xo, oo, io;
        kept_offsets(p, o * W + tile * kTile, &xo, &oo, &io);
        const int64_t w = std::min(kTile, W - tile * kTile);
        const T* first = x + xo;
        for (int64_t j = 0; j < w; ++j) best[j] = V(first[j]), at[j] = 0;
        for (int64_t r = 1; r < p.n_red; ++r) {
          const T* row = x + xo + reduced_offset(p, r);
          for (int64_t j = 0; j < w; ++j) {
            V v = V(row[j]);
            if (better(v, best[j])) best[j] = v, at[j] = r;
          }
        }
        const int64_t os = p.ko[p.nk - 1], is = p.ki[p.nk - 1];
        for (int64_t j = 0; j < w; ++j) {
          store(out, oo + j * os, best[j]);
          if (ip) ip[io + j * is] = at[j];
        }
      }
    });
    return;
  }
  const int64_t chunks = (p.n_red + kChunk - 1) / kChunk;
  const int64_t rs = p.rx[p.nr - 1];
  std::vector<V> part_v(size_t(chunks > 1 ? p.n_out * chunks : 0));
  std::vector<int64_t> part_i(part_v.size());
  const int64_t grain = std::max<int64_t>(1, kGrainSize / std::min(p.n_red, kChunk));
  parallel_for(p.n_out * chunks, grain, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      int64_t j = t / chunks, c = t % chunks;
      int64_t xo, oo, io;
      kept_offsets(p, j, &xo, &oo, &io);
      const int64_t r0 = c * kChunk;
      V best = V(x[xo + reduced_offset(p, r0)]);
      int64_t at = r0;
      for_each_run(p, r0, std::min(p.n_red, r0 + kChunk), [&](int64_t off, int64_t n, int64_t f) {
        const T* q = x + xo + off;
        for (int64_t i = 0; i < n; ++i) {
          V v = V(q[i * rs]);
          if (better(v, best)) best = v, at = f + i;
        }
      });
      if (chunks > 1) {
        part_v[size_t(t)] = best, part_i[size_t(t)] = at;
      } else {
        store(out, oo, best);
        if (ip) ip[io] = at;
      }
    }
  });
  if (chunks == 1) return;
  for (int64_t j = 0; j < p.n_out; ++j) {  // chunks in order: earlier ones win ties
    V best = part_v[size_t(j * chunks)];
    int64_t at = part_i[size_t(j * chunks)];
    for (int64_t c = 1; c < chunks; ++c)
      if (better(part_v[size_t(j * chunks + c)], best))
        best = part_v[size_t(j * chunks + c)], at = part_i[size_t(j * chunks + c)];
    int64_t xo, oo, io;
    kept_offsets(p, j, &xo, &oo, &io);
    store(out, oo, best);
    if (ip) ip[io] = at;
  }
}

void check_cpu_tensor(const char* op, const Tensor& t, const char* what) {
  MT_CHECK(t.defined(), "[{}] the {} tensor is undefined", op, what);
  MT_CHECK(!t.is_fake() && t.is_cpu(), "[{}] the {} tensor must be a CPU tensor with data", op,
           what);
}

// The dtype x is read as: one whose accumulator is out's compute type.
DType read_dtype(DType x, DType out) {
  auto acc = [](DType t) { return t == DType::Float64 ? 1 : (is_floating(t) ? 0 : 2); };
  if (acc(x) == acc(out)) return x;
  return out == DType::Float64 ? DType::Float64
                               : (is_floating(out) ? DType::Float32 : DType::Int64);
}

void reduce(Kind kind, const char* op, const Tensor& x_in, const bool* reduced, const Tensor& out,
            const int64_t* ostr, const Tensor& indices, const int64_t* istr) {
  check_cpu_tensor(op, x_in, "input");
  check_cpu_tensor(op, out, "output");
  if (kind == Kind::Mean)
    MT_CHECK(is_floating(out.dtype()),
             "[mean] needs a floating output, got {}; pass a float32 or float64 out", out.dtype());
  Tensor x = x_in;
  DType rd = read_dtype(x.dtype(), out.dtype());
  if (rd != x.dtype()) {  // e.g. int64 summed into a float32 out: convert first
    x = empty(x_in.sizes(), {.dtype = rd});
    mt::detail::copy_impl(x, x_in);
  }
  Plan p = make_plan(x, reduced, ostr, istr);
  if (kind == Kind::Max)
    MT_CHECK(p.n_red > 0,
             "[max] cannot reduce over dims of size 0 (input shape {}): the max of nothing is "
             "undefined; give the reduced dims at least one element",
             x.sizes());
  if (p.n_out == 0) return;
  if (p.n_red == 0) {
    mt::detail::fill_impl(out, kind == Kind::Mean ? NAN : 0.0);
    return;
  }
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* xp = static_cast<const T*>(x.data_ptr());
    if (kind == Kind::Max)
      max_kernel<T>(xp, p, Dest(out), indices);
    else
      sum_kernel<T>(kind, xp, p, Dest(out));
  });
}

// Checks dims and out's shape, then reduces; keepdim-form strides come from out.
void reduce_dims(Kind kind, const char* op, const Tensor& x, std::span<const int64_t> dims,
                 bool keepdim, const Tensor& out, const Tensor& indices) {
  check_cpu_tensor(op, x, "input");
  check_cpu_tensor(op, out, "output");
  const int64_t nd = x.dim();
  bool reduced[kMaxDims] = {};
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t d = dims[i];
    MT_CHECK(d >= 0 && d < std::max<int64_t>(nd, 1),
             "[{}] dim {} is out of range for a tensor of {} dims (dims must be wrapped)", op, d,
             nd);
    MT_CHECK(i == 0 || dims[i - 1] < d, "[{}] dims must be sorted and unique, got [{}]", op,
             fmt::join(dims, ", "));
    if (d < nd) reduced[d] = true;
  }
  if (dims.empty())
    for (int64_t d = 0; d < nd; ++d) reduced[d] = true;
  Shape expect;
  for (int64_t d = 0; d < nd; ++d)
    if (!reduced[d])
      expect.push_back(x.size(d));
    else if (keepdim)
      expect.push_back(1);
  MT_CHECK(out.sizes() == expect, "[{}] the output has shape {}, but reducing {} gives {}", op,
           out.sizes(), x.sizes(), expect);
  if (indices.defined()) {
    check_cpu_tensor(op, indices, "indices");
    MT_CHECK(indices.sizes() == expect && indices.dtype() == DType::Int64,
             "[{}] indices must be int64 of shape {}, got {} of shape {}", op, expect,
             indices.dtype(), indices.sizes());
  }
  int64_t ostr[kMaxDims] = {}, istr[kMaxDims] = {};
  for (int64_t d = 0, o = 0; d < nd; ++d) {
    if (reduced[d] && !keepdim) continue;
    ostr[d] = reduced[d] ? 0 : out.stride(o);
    istr[d] = indices.defined() && !reduced[d] ? indices.stride(o) : 0;
    ++o;
  }
  reduce(kind, op, x, reduced, out, ostr, indices, istr);
}

}  // namespace

void sum(const Tensor& x, std::span<const int64_t> dims, bool keepdim, const Tensor& out) {
  reduce_dims(Kind::Sum, "sum", x, dims, keepdim, out, Tensor());
}

void mean(const Tensor& x, std::span<const int64_t> dims, bool keepdim, const Tensor& out) {
  reduce_dims(Kind::Mean, "mean", x, dims, keepdim, out, Tensor());
}

void max(const Tensor& x, std::span<const int64_t> dims, bool keepdim, const Tensor& out,
         const Tensor& indices) {
  reduce_dims(Kind::Max, "max", x, dims, keepdim, out, indices);
}

void sum_to(const Tensor& grad, const Shape& shape, const Tensor& out) {
  check_cpu_tensor("sum_to", grad, "gradient");
  check_cpu_tensor("sum_to", out, "output");
  MT_CHECK(out.sizes() == shape, "[sum_to] the output has shape {}, expected {}", out.sizes(),
           shape);
  const int64_t nd = grad.dim(), lead = nd - int64_t(shape.size());
  bool ok = lead >= 0;
  for (int64_t d = 0; d < int64_t(shape.size()) && ok; ++d)
    ok = shape[d] == grad.size(lead + d) || shape[d] == 1;
  MT_CHECK(ok, "[sum_to] a gradient of shape {} cannot come from broadcasting shape {}",
           grad.sizes(), shape);
  bool reduced[kMaxDims] = {};
  int64_t ostr[kMaxDims] = {}, istr[kMaxDims] = {};
  bool any = false;
  for (int64_t d = 0; d < nd; ++d) {
    reduced[d] = d < lead || (shape[d - lead] == 1 && grad.size(d) != 1);
    ostr[d] = d < lead ? 0 : out.stride(d - lead);
    any = any || reduced[d];
  }
  if (!any) return mt::detail::copy_impl(out, grad);
  reduce(Kind::Sum, "sum_to", grad, reduced, out, ostr, Tensor(), istr);
}

}  // namespace mt::cpu
