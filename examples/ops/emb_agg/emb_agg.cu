// SPDX-License-Identifier: MIT
// deeprec::emb_agg's CUDA kernels: embedding-bag sums and means, one warp a bag, the
// lanes over the embedding dimension (VEC consecutive values a lane: 4 floats is one
// 16-byte load, used when D and the pointers allow it). Compiled by NVRTC through
// mt::jit::kernel.
//
// Bags: bag b is indices[offsets[b] .. end), end = offsets[b + 1], or n_indices for the
// last bag without a final offset. An index outside [0, V) adds nothing (the op checks indices on
// CPU tensors; Note [Index checks] in emb_agg.cpp); a bag whose end is before its start is empty.

// bfloat16 as bits, named as minitensor's launch expects it ("mt::BFloat16"). The file does
// not include the runtime's headers: the test compiles it as host C++ inside a namespace.
namespace mt {
struct BFloat16 {
  unsigned short bits;
};
}  // namespace mt

#if defined(__CUDACC_RTC__) || defined(__CUDACC__)
#define EMB_DEVICE 1
#else
#define EMB_DEVICE 0
#endif

// Values are summed in Acc<T>: float for bfloat16 and float, double for double.
template <typename T>
struct EmbAcc {
  using type = T;
};
template <>
struct EmbAcc<mt::BFloat16> {
  using type = float;
};
template <typename T>
using Acc = typename EmbAcc<T>::type;

__device__ __forceinline__ float emb_load(float x) { return x; }
__device__ __forceinline__ double emb_load(double x) { return x; }
__device__ __forceinline__ float emb_load(mt::BFloat16 b) {
#if EMB_DEVICE
  return __uint_as_float(unsigned(b.bits) << 16);
#else
  return __builtin_bit_cast(float, unsigned(b.bits) << 16);
#endif
}
template <typename T>
__device__ __forceinline__ T emb_store(Acc<T> v) {
  if constexpr (sizeof(T) == 2) {  // bfloat16, round to nearest even
#if EMB_DEVICE
    unsigned short h;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(v));
    return T{h};
#else
    unsigned u = __builtin_bit_cast(unsigned, v);
    if ((u & 0x7fffffffu) > 0x7f800000u) return T{(unsigned short)((u >> 16) | 0x40u)};
    u += 0x7fffu + ((u >> 16) & 1u);
    return T{(unsigned short)(u >> 16)};
#endif
  } else {
    return v;
  }
}

template <typename T>
struct alignas(4 * sizeof(T)) EmbVec4 {
  T v[4];
};

// Bag b's [start, end) within [0, n_indices): offsets has n_bags entries, or n_bags + 1
// with the final offset (include_last_offset).
struct EmbBag {
  long long start, end;
};
__device__ __forceinline__ EmbBag emb_bag(const long long* offsets, int b, int n_offsets,
                                          long long n_indices) {
  long long s = offsets[b], e = b + 1 < n_offsets ? offsets[b + 1] : n_indices;
  s = s < 0 ? 0 : s;
  e = e > n_indices ? n_indices : e;
  return {s, e > s ? e : s};
}

// out[b, :] = sum over the bag of w_i * weight[indices[i], :], w_i = per_sample_weights[i]
// (has_psw), else 1; divided by the bag's size when mean.
template <typename T, int VEC>
__global__ void emb_agg_forward(const T* __restrict__ weight, const long long* __restrict__ indices,
                                const long long* __restrict__ offsets, const T* __restrict__ psw,
                                T* __restrict__ out, int n_bags, int n_offsets, int D,
                                long long n_indices, long long V, int mean, int has_psw) {
  const int warps = blockDim.x / 32;
  const int b = blockIdx.x * warps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (b >= n_bags) return;
  const EmbBag bag = emb_bag(offsets, b, n_offsets, n_indices);
  const long long start = bag.start, end = bag.end;
  using A = Acc<T>;
  for (int d0 = lane * VEC; d0 < D; d0 += 32 * VEC) {
    A acc[VEC];
    for (int j = 0; j < VEC; ++j) acc[j] = A(0);
    for (long long i = start; i < end; ++i) {
      const long long row = indices[i];
      if (row < 0 || row >= V) continue;
      const A w = has_psw ? emb_load(psw[i]) : A(1);
      const T* src = weight + row * D + d0;
      if (VEC == 4) {
        const EmbVec4<T> x = *reinterpret_cast<const EmbVec4<T>*>(src);
        for (int j = 0; j < VEC; ++j) acc[j] += w * emb_load(x.v[j]);
      } else {
        for (int j = 0; j < VEC; ++j) acc[j] += w * emb_load(src[j]);
      }
    }
    const A scale = mean && end > start ? A(1) / A(end - start) : A(1);
    for (int j = 0; j < VEC; ++j) out[(long long)b * D + d0 + j] = emb_store<T>(acc[j] * scale);
  }
}

// grad_weight[indices[i], :] += w_i * grad[b, :] (w_i as in the forward, over the bag's
// size when mean), by atomics: duplicates within and across bags add up. The order of the
// additions varies from run to run, so float32 results may differ in the last bits (the
// op's `deterministic` flag takes the sorted-segment path below instead). VEC = 4 gives
// each lane 4 consecutive values: one 16-byte vector reduction (red.global.add.v4.f32) on
// sm_90, 4 scalar atomics before it. float and double only (no bfloat16 atomics: the op
// reduces bfloat16 gradients by segments).
template <typename T, int VEC>
__device__ __forceinline__ void emb_atomic_add(T* p, const T* v) {
#if EMB_DEVICE && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if constexpr (VEC == 4 && sizeof(T) == 4) {
    asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(p), "f"(v[0]), "f"(v[1]),
                 "f"(v[2]), "f"(v[3])
                 : "memory");
    return;
  }
#endif
  for (int j = 0; j < VEC; ++j) atomicAdd(p + j, v[j]);
}

template <typename T, int VEC>
__global__ void emb_agg_backward_weight(const T* __restrict__ grad,
                                        const long long* __restrict__ indices,
                                        const long long* __restrict__ offsets,
                                        const T* __restrict__ psw, T* __restrict__ grad_weight,
                                        int n_bags, int n_offsets, int D, long long n_indices,
                                        long long V, int mean, int has_psw) {
  const int warps = blockDim.x / 32;
  const int b = blockIdx.x * warps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (b >= n_bags) return;
  const EmbBag bag = emb_bag(offsets, b, n_offsets, n_indices);
  const long long start = bag.start, end = bag.end;
  const T scale = mean && end > start ? T(1) / T(end - start) : T(1);
  for (int d0 = lane * VEC; d0 < D; d0 += 32 * VEC) {
    T g[VEC];
    for (int j = 0; j < VEC; ++j) g[j] = grad[(long long)b * D + d0 + j];
    for (long long i = start; i < end; ++i) {
      const long long row = indices[i];
      if (row < 0 || row >= V) continue;
      const T w = (has_psw ? psw[i] : T(1)) * scale;
      T v[VEC];
      for (int j = 0; j < VEC; ++j) v[j] = w * g[j];
      emb_atomic_add<T, VEC>(grad_weight + row * D + d0, v);
    }
  }
}

// grad_psw[i] = <grad[b, :], weight[indices[i], :]> for i in bag b: a warp-wide dot.
template <typename T>
__global__ void emb_agg_backward_psw(const T* __restrict__ grad, const T* __restrict__ weight,
                                     const long long* __restrict__ indices,
                                     const long long* __restrict__ offsets,
                                     T* __restrict__ grad_psw, int n_bags, int n_offsets, int D,
                                     long long n_indices, long long V) {
  const int warps = blockDim.x / 32;
  const int b = blockIdx.x * warps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (b >= n_bags) return;
  const EmbBag bag = emb_bag(offsets, b, n_offsets, n_indices);
  const long long start = bag.start, end = bag.end;
  for (long long i = start; i < end; ++i) {
    const long long row = indices[i];
    Acc<T> s = 0;
    if (row >= 0 && row < V)
      for (int d = lane; d < D; d += 32)
        s += emb_load(grad[(long long)b * D + d]) * emb_load(weight[row * D + d]);
    for (int o = 16; o > 0; o /= 2) s += __shfl_down_sync(0xffffffffu, s, o);
    if (lane == 0) grad_psw[i] = emb_store<T>(s);
  }
}

// Note [Sorted-segment backward]
// The deterministic weight gradient, without atomics on values: sort the positions i by
// their row (a stable LSD radix sort of (row, i) pairs, 8 bits a pass), so each row's
// occurrences form one segment in the order of i; then one warp a row of grad_weight
// sums its segment in that order (in float for bfloat16) and writes the row, zeros for a
// row that no index names. That one pass writes the whole dense gradient, so it also
// replaces the zero-fill the atomic path needs first. Steps (emb_agg.cpp launches them):
//   emb_seg_init      keys[i] = indices[i] (V for an index out of range; the op fills keys
//                     with V first for positions outside every bag: they sort last and are
//                     never summed), vals[i] = i, bag_of[i] = b
//   emb_sort_hist     per tile of kEmbSortTile keys, the count of each 8-bit digit,
//                     stored digit-major: hist[digit * tiles + tile]
//   emb_sort_scan     a block a digit: hist[digit, :] becomes its exclusive prefix sum
//                     over the tiles, totals[digit] the digit's count (the scatter adds
//                     the counts of the smaller digits)
//   emb_sort_scatter  a warp a tile, 32 keys a step in order, so equal digits keep their
//                     order (the sort is stable); integer counters in shared memory only
//   emb_seg_starts    seg_start[r] = the first sorted position of row r (V + 1 entries)
//   emb_seg_reduce    a warp a row: the sum over its segment (512 values of the row in
//                     registers for VEC = 4, 128 for VEC = 1; a longer row takes more passes)
constexpr int kEmbSortTile = 1024;
constexpr int kEmbSortBins = 256;

__global__ void emb_seg_init(const long long* __restrict__ indices,
                             const long long* __restrict__ offsets, long long* __restrict__ keys,
                             long long* __restrict__ vals, long long* __restrict__ bag_of,
                             int n_bags, int n_offsets, long long n_indices, long long V) {
  const int warps = blockDim.x / 32;
  const int b = blockIdx.x * warps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (b >= n_bags) return;
  const EmbBag bag = emb_bag(offsets, b, n_offsets, n_indices);
  for (long long i = bag.start + lane; i < bag.end; i += 32) {
    const long long row = indices[i];
    keys[i] = row >= 0 && row < V ? row : V;
    vals[i] = i;
    bag_of[i] = b;
  }
}

__device__ __forceinline__ int emb_digit(long long key, int shift) {
  return int((unsigned long long)key >> shift) & (kEmbSortBins - 1);
}

// One block (a multiple of 32 threads) a tile. The lanes of a warp with the same digit
// add their count once, by their lowest lane (a pass over the high bits of small keys
// has only a few digits, and one shared counter would take every lane's add in turn).
__global__ void emb_sort_hist(const long long* __restrict__ keys, long long n, int shift,
                              long long* __restrict__ hist, int tiles) {
  __shared__ int count[kEmbSortBins];
  for (int d = threadIdx.x; d < kEmbSortBins; d += blockDim.x) count[d] = 0;
  __syncthreads();
  const long long t0 = (long long)blockIdx.x * kEmbSortTile;
  const int lane = threadIdx.x % 32;
  for (int k = threadIdx.x; k < kEmbSortTile; k += blockDim.x) {  // the same trips a warp
    const long long i = t0 + k;
    const int d = i < n ? emb_digit(keys[i], shift) : -1;
    const unsigned peers = __match_any_sync(0xffffffffu, d);
    if (d >= 0 && (peers & ((1u << lane) - 1u)) == 0u) atomicAdd(&count[d], __popc(peers));
  }
  __syncthreads();
  for (int d = threadIdx.x; d < kEmbSortBins; d += blockDim.x)
    hist[(long long)d * tiles + blockIdx.x] = count[d];
}

// A block a digit d: hist[d, :] (one digit's counts over the tiles) becomes its exclusive
// prefix sum, and totals[d] the row's sum. Rows are scanned blockDim.x tiles at a time,
// coalesced, each chunk by a scan in shared memory (blockDim.x a power of two, up to 1024).
__global__ void emb_sort_scan(long long* __restrict__ hist, int tiles,
                              long long* __restrict__ totals) {
  __shared__ long long buf[1024];
  long long* row = hist + (long long)blockIdx.x * tiles;
  long long carry = 0;
  for (int c0 = 0; c0 < tiles; c0 += blockDim.x) {
    const int t = c0 + threadIdx.x;
    const long long v = t < tiles ? row[t] : 0;
    buf[threadIdx.x] = v;
    __syncthreads();
    for (unsigned step = 1; step < blockDim.x; step *= 2) {  // inclusive, Hillis-Steele
      const long long add = threadIdx.x >= step ? buf[threadIdx.x - step] : 0;
      __syncthreads();
      buf[threadIdx.x] += add;
      __syncthreads();
    }
    if (t < tiles) row[t] = carry + buf[threadIdx.x] - v;
    carry += buf[blockDim.x - 1];
    __syncthreads();  // buf is rewritten by the next chunk
  }
  if (threadIdx.x == 0) totals[blockIdx.x] = carry;
}

// One warp (a block of 32 threads) a tile: 32 keys a step, in order; a key goes to the
// keys of smaller digits (totals' prefix) plus its digit's keys in earlier tiles (hist)
// plus those earlier in this tile (earlier steps, then lower lanes of this step: the lanes
// with the same digit, by __match_any_sync).
__global__ void emb_sort_scatter(const long long* __restrict__ keys_in,
                                 const long long* __restrict__ vals_in,
                                 long long* __restrict__ keys_out, long long* __restrict__ vals_out,
                                 long long n, int shift, const long long* __restrict__ hist,
                                 const long long* __restrict__ totals, int tiles) {
  __shared__ long long next[kEmbSortBins];
  const int lane = threadIdx.x;
  for (int d = lane; d < kEmbSortBins; d += 32) next[d] = totals[d];
  __syncthreads();
  if (lane == 0) {
    long long run = 0;
    for (int d = 0; d < kEmbSortBins; ++d) {
      const long long v = next[d];
      next[d] = run;
      run += v;
    }
  }
  __syncthreads();
  for (int d = lane; d < kEmbSortBins; d += 32) next[d] += hist[(long long)d * tiles + blockIdx.x];
  __syncthreads();
  const long long t0 = (long long)blockIdx.x * kEmbSortTile;
  const long long t1 = t0 + kEmbSortTile < n ? t0 + kEmbSortTile : n;
  for (long long base = t0; base < t1; base += 32) {
    const long long i = base + lane;
    const bool live = i < t1;
    const long long key = live ? keys_in[i] : 0;
    const long long val = live ? vals_in[i] : 0;
    const int d = live ? emb_digit(key, shift) : -1;
    const unsigned peers = __match_any_sync(0xffffffffu, d);
    const int rank = __popc(peers & ((1u << lane) - 1u));
    const bool last = (peers >> lane) == 1u;  // the highest lane of its digit
    if (live) {
      const long long at = next[d] + rank;
      keys_out[at] = key;
      vals_out[at] = val;
    }
    __syncthreads();
    if (live && last) next[d] += rank + 1;
    __syncthreads();
  }
}

// seg_start[r] for r in [0, V]: the first sorted position k with keys[k] >= r (n when
// none), by a binary search a row.
__global__ void emb_seg_starts(const long long* __restrict__ keys, long long n, long long V,
                               long long* __restrict__ seg_start) {
  const long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (r > V) return;
  long long lo = 0, hi = n;
  while (lo < hi) {
    const long long mid = lo + (hi - lo) / 2;
    if (keys[mid] < r)
      lo = mid + 1;
    else
      hi = mid;
  }
  seg_start[r] = lo;
}

// A warp a row r of grad_weight: the sum, in sorted (so index) order, of
// w_i * grad[bag_of[i], :] over the row's segment, w_i = psw[i] (has_psw) over the bag's
// size (mean); zeros for an empty segment. The lanes load 32 entries' bag and weight at
// once, then pass them round by shuffles, so the loads of a long segment overlap.
template <typename T, int VEC>
__global__ void emb_seg_reduce(const T* __restrict__ grad, const long long* __restrict__ offsets,
                               const T* __restrict__ psw, const long long* __restrict__ vals,
                               const long long* __restrict__ bag_of,
                               const long long* __restrict__ seg_start, T* __restrict__ grad_weight,
                               int n_offsets, int D, long long n_indices, long long V, int mean,
                               int has_psw) {
  using A = Acc<T>;
  const int warps = blockDim.x / 32;
  const long long r = (long long)blockIdx.x * warps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= V) return;  // a warp's lanes share r: whole warps leave
  const long long k0 = seg_start[r], k1 = seg_start[r + 1];
  constexpr int kRowVecs = 4;  // 32 * VEC * kRowVecs values of the row in registers a pass
  for (int dbase = 0; dbase < D; dbase += 32 * VEC * kRowVecs) {
    A acc[kRowVecs][VEC];
    for (int c = 0; c < kRowVecs; ++c)
      for (int j = 0; j < VEC; ++j) acc[c][j] = A(0);
    for (long long kb = k0; kb < k1; kb += 32) {
      int my_bag = 0;
      A my_w = A(0);
      if (kb + lane < k1) {
        const long long i = vals[kb + lane];
        my_bag = int(bag_of[i]);
        my_w = has_psw ? emb_load(psw[i]) : A(1);
        if (mean) {
          const EmbBag bag = emb_bag(offsets, my_bag, n_offsets, n_indices);
          my_w = my_w / A(bag.end - bag.start);
        }
      }
      const int m = k1 - kb < 32 ? int(k1 - kb) : 32;
      for (int e = 0; e < m; ++e) {
        const int b = __shfl_sync(0xffffffffu, my_bag, e);
        const A w = __shfl_sync(0xffffffffu, my_w, e);
        for (int c = 0; c < kRowVecs; ++c) {
          const int d0 = dbase + (c * 32 + lane) * VEC;
          if (d0 >= D) break;
          const T* g = grad + (long long)b * D + d0;
          if (VEC == 4) {
            const EmbVec4<T> x = *reinterpret_cast<const EmbVec4<T>*>(g);
            for (int j = 0; j < VEC; ++j) acc[c][j] += w * emb_load(x.v[j]);
          } else {
            for (int j = 0; j < VEC; ++j) acc[c][j] += w * emb_load(g[j]);
          }
        }
      }
    }
    for (int c = 0; c < kRowVecs; ++c) {
      const int d0 = dbase + (c * 32 + lane) * VEC;
      if (d0 >= D) break;
      T* o = grad_weight + r * D + d0;
      if (VEC == 4) {
        EmbVec4<T> y;
        for (int j = 0; j < VEC; ++j) y.v[j] = emb_store<T>(acc[c][j]);
        *reinterpret_cast<EmbVec4<T>*>(o) = y;
      } else {
        for (int j = 0; j < VEC; ++j) o[j] = emb_store<T>(acc[c][j]);
      }
    }
  }
}
