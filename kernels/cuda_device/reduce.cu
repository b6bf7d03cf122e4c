// SPDX-License-Identifier: MIT
// Reductions on the GPU: sum (mean is a sum with a scale) and max with its index, over
// an input seen as a contiguous [O, R, I] block: out[o, i] = reduce over r of x[o, r, i].
// Two kernels: reduce_rows when I == 1 (a warp per row chunk, shuffles to combine), and
// reduce_cols when I > 1 (a thread per column, reads coalesced along i). A long R is cut
// into chunks so the whole GPU works; each chunk writes a partial (an Acc) and the host
// runs the same kernels again over the partials (FromAcc), until one chunk is left.
// The chunking depends on the shape only, so a result does not depend on the device.
#include "common.cuh"

namespace mt {

// The accumulator type: float for the 16-bit floats, int64 for bool.
template <typename T>
struct acc_type {
  using type = compute_t<T>;
};
template <>
struct acc_type<bool> {
  using type = long long;
};
template <typename T>
using acc_t = typename acc_type<T>::type;

// A partial result: the value so far and, for max, the position of the winner along R.
template <typename A>
struct Acc {
  A v;
  long long i;
};

template <typename A>
__device__ __forceinline__ bool is_nan_(A v) {
  return v != v;  // false for integers
}
struct SumR {
  template <typename A>
  static __device__ __forceinline__ Acc<A> identity() {
    return {A(0), 0};
  }
  template <typename A>
  static __device__ __forceinline__ Acc<A> join(Acc<A> x, Acc<A> y) {
    return {x.v + y.v, 0};
  }
};

// NaN wins over numbers; between equals, the lower position (the first) wins.
struct MaxR {
  template <typename A>
  static __device__ __forceinline__ Acc<A> identity() {
    return {lowest_value<A>(), 9223372036854775807LL};
  }
  template <typename A>
  static __device__ __forceinline__ Acc<A> join(Acc<A> x, Acc<A> y) {
    const bool xn = is_nan_(x.v), yn = is_nan_(y.v);
    if (xn != yn) return xn ? x : y;
    if (!xn && x.v != y.v) return x.v > y.v ? x : y;
    return x.i <= y.i ? x : y;
  }
};

// Element r of a row as an Acc: from the input dtype, or a partial of an earlier pass.
template <typename In, bool FromAcc>
__device__ __forceinline__ Acc<acc_t<In>> load_acc(const void* in, long long at, long long r) {
  using A = acc_t<In>;
  if constexpr (FromAcc)
    return static_cast<const Acc<A>*>(in)[at];
  else
    return {A(load_compute(static_cast<const In*>(in)[at])), r};
}

// The last pass writes the value (times scale: 1/R for mean) and, for max, the index.
template <typename Out, typename A>
__device__ __forceinline__ void store_result(Out* out, long long* indices, long long at, Acc<A> acc,
                                             double scale) {
  A v = acc.v;
  if (scale != 1.0) v = A(v * A(scale));
  out[at] = store_compute<Out>(compute_t<Out>(v));
  if (indices) indices[at] = acc.i;
}

}  // namespace mt

// rows = O * chunks items of one warp each; item (o, c) reduces x[o, c*chunk_len ...]
// of a row of length R (I == 1). With chunks == 1 it writes the result, else partial[o *
// chunks + c], which the next pass reads as rows of length chunks.
template <typename In, typename Out, typename R, bool FromAcc>
__global__ void reduce_rows(const void* in, Out* out, long long* indices,
                            mt::Acc<mt::acc_t<In>>* partial, long long items, long long row_len,
                            long long chunk_len, long long chunks, double scale) {
  using A = mt::acc_t<In>;
  const int lane = threadIdx.x % 32;
  const long long warps = (long long)gridDim.x * (blockDim.x / 32);
  for (long long item = mt::global_thread_index() / 32; item < items; item += warps) {
    const long long o = item / chunks, c = item % chunks;
    const long long begin = c * chunk_len;
    const long long end = begin + chunk_len < row_len ? begin + chunk_len : row_len;
    mt::Acc<A> acc = R::template identity<A>();
    for (long long r = begin + lane; r < end; r += 32)
      acc = R::join(acc, mt::load_acc<In, FromAcc>(in, o * row_len + r, r));
    MT_UNROLL
    for (int d = 16; d > 0; d /= 2) {
      mt::Acc<A> other{__shfl_down_sync(0xffffffffu, acc.v, d),
                       __shfl_down_sync(0xffffffffu, acc.i, d)};
      acc = R::join(acc, other);
    }
    if (lane == 0) {
      if (partial)
        partial[item] = acc;
      else
        mt::store_result(out, indices, o, acc, scale);
    }
  }
}

// A thread per (o, c, i): reduces x[o, r, i] over r in chunk c. With chunks == 1 it
// writes out[o, i], else partial[(o * chunks + c) * I + i], read next as [O, chunks, I].
template <typename In, typename Out, typename R, bool FromAcc>
__global__ void reduce_cols(const void* in, Out* out, long long* indices,
                            mt::Acc<mt::acc_t<In>>* partial, long long outer, long long len,
                            long long inner, long long chunk_len, long long chunks, double scale) {
  using A = mt::acc_t<In>;
  const long long total = outer * chunks * inner;
  for (long long t = mt::global_thread_index(); t < total; t += mt::grid_stride()) {
    const long long i = t % inner, oc = t / inner;
    const long long c = oc % chunks, o = oc / chunks;
    const long long begin = c * chunk_len;
    const long long end = begin + chunk_len < len ? begin + chunk_len : len;
    mt::Acc<A> acc = R::template identity<A>();
    for (long long r = begin; r < end; ++r)
      acc = R::join(acc, mt::load_acc<In, FromAcc>(in, (o * len + r) * inner + i, r));
    if (partial)
      partial[t] = acc;
    else
      mt::store_result(out, indices, o * inner + i, acc, scale);
  }
}
