// SPDX-License-Identifier: MIT
// Fill and copy-with-conversion on the GPU, for the runtime's device copies.
// Types: float, double, mt::Half, mt::BFloat16, long long (int64) and bool;
// conversions follow mt::convert in common.cuh. Grid-stride loops throughout.
#include "common.cuh"

template <typename T>
__global__ void fill(T* __restrict__ out, long long n, T value) {
  for (long long i = mt::global_thread_index(); i < n; i += mt::grid_stride()) out[i] = value;
}

template <typename T, typename Index>
__device__ __forceinline__ void fill_strided_loop(T* out, long long n, T value,
                                                  const mt::StridedLayout& l) {
  for (long long i = mt::global_thread_index(); i < n; i += mt::grid_stride()) {
    long long off[1];
    mt::strided_offsets<1>(l, (Index)i, off);
    out[off[0]] = value;
  }
}

// layout.strides[0] belongs to out.
template <typename T>
__global__ void fill_strided(T* out, long long n, T value, mt::StridedLayout layout) {
  if (n <= 0xffffffffLL)
    fill_strided_loop<T, unsigned>(out, n, value, layout);
  else
    fill_strided_loop<T, unsigned long long>(out, n, value, layout);
}

// Both contiguous.
template <typename Dst, typename Src>
__global__ void copy_cast(Dst* __restrict__ dst, const Src* __restrict__ src, long long n) {
  for (long long i = mt::global_thread_index(); i < n; i += mt::grid_stride())
    dst[i] = mt::convert<Dst>(src[i]);
}

template <typename Dst, typename Src, typename Index>
__device__ __forceinline__ void copy_cast_strided_loop(Dst* dst, const Src* src, long long n,
                                                       const mt::StridedLayout& l) {
  for (long long i = mt::global_thread_index(); i < n; i += mt::grid_stride()) {
    long long off[2];
    mt::strided_offsets<2>(l, (Index)i, off);
    dst[off[0]] = mt::convert<Dst>(src[off[1]]);
  }
}

// Any strides on either side (a contiguous dst has row-major strides);
// layout.strides[0] belongs to dst, [1] to src.
template <typename Dst, typename Src>
__global__ void copy_cast_strided(Dst* dst, const Src* src, long long n, mt::StridedLayout layout) {
  if (n <= 0xffffffffLL)
    copy_cast_strided_loop<Dst, Src, unsigned>(dst, src, n, layout);
  else
    copy_cast_strided_loop<Dst, Src, unsigned long long>(dst, src, n, layout);
}
