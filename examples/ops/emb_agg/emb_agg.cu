// SPDX-License-Identifier: MIT
// deeprec::emb_agg's CUDA kernels: embedding-bag sums and means, one warp a bag, the
// lanes over the embedding dimension (VEC consecutive values a lane: 4 floats is one
// 16-byte load, used when D and the pointers allow it). Compiled by NVRTC through
// mt::jit::kernel.
//
// Bags: bag b is indices[offsets[b] .. end), end = offsets[b + 1], or n_indices for the
// last bag without a final offset. An index outside [0, V) adds nothing (the op checks indices on
// CPU tensors; Note [Index checks] in emb_agg.cpp); a bag whose end is before its start is empty.

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
  for (int d0 = lane * VEC; d0 < D; d0 += 32 * VEC) {
    T acc[VEC];
    for (int j = 0; j < VEC; ++j) acc[j] = T(0);
    for (long long i = start; i < end; ++i) {
      const long long row = indices[i];
      if (row < 0 || row >= V) continue;
      const T w = has_psw ? psw[i] : T(1);
      const T* src = weight + row * D + d0;
      if (VEC == 4) {
        const EmbVec4<T> x = *reinterpret_cast<const EmbVec4<T>*>(src);
        for (int j = 0; j < VEC; ++j) acc[j] += w * x.v[j];
      } else {
        for (int j = 0; j < VEC; ++j) acc[j] += w * src[j];
      }
    }
    const T scale = mean && end > start ? T(1) / T(end - start) : T(1);
    for (int j = 0; j < VEC; ++j) out[(long long)b * D + d0 + j] = acc[j] * scale;
  }
}

// grad_weight[indices[i], :] += w_i * grad[b, :] (w_i as in the forward, over the bag's
// size when mean), by atomics: duplicates within and across bags add up. The order of the
// additions varies from run to run, so float32 results may differ in the last bits.
template <typename T>
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
  for (long long i = start; i < end; ++i) {
    const long long row = indices[i];
    if (row < 0 || row >= V) continue;
    const T w = (has_psw ? psw[i] : T(1)) * scale;
    for (int d = lane; d < D; d += 32)
      atomicAdd(grad_weight + row * D + d, w * grad[(long long)b * D + d]);
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
    T s = T(0);
    if (row >= 0 && row < V)
      for (int d = lane; d < D; d += 32) s += grad[(long long)b * D + d] * weight[row * D + d];
    for (int o = 16; o > 0; o /= 2) s += __shfl_down_sync(0xffffffffu, s, o);
    if (lane == 0) grad_psw[i] = s;
  }
}
