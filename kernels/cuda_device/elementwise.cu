// SPDX-License-Identifier: MIT
// The elementwise ops on the GPU from four templates: unary and binary, each contiguous
// (16-byte packs when every pointer is aligned) and strided (views and broadcasts read in
// place; a broadcast dim has stride 0). An op is one functor below, named by the Id of its
// row in kernels/elementwise_table.h: one line of math on the compute type C (float for
// the 16-bit types), with the op's two scalars a and b (alpha, the scalar operand, the
// exponent) already converted to C.
// All operands of one launch share the dtype T, and the host converts mixed inputs first,
// but for binary_op_bcast (Note [Broadcast binary kernel]), which reads each in its own type.
#include "common.cuh"

namespace mt {

// The scalars of an op, passed by value: add's alpha, add.Scalar's other, pow's exponent.
struct OpScalars {
  double a, b;
};

namespace op {
// clang-format off
struct Neg     { template <class C> __device__ C operator()(C x, C, C) const { return -x; } };
struct Exp     { template <class C> __device__ C operator()(C x, C, C) const { return exp_(x); } };
struct Log     { template <class C> __device__ C operator()(C x, C, C) const { return log_(x); } };
struct Sqrt    { template <class C> __device__ C operator()(C x, C, C) const { return sqrt_(x); } };
struct Abs     { template <class C> __device__ C operator()(C x, C, C) const { return x < C(0) ? -x : x + C(0); } };
struct Sign    { template <class C> __device__ C operator()(C x, C, C) const { return x > C(0) ? C(1) : x < C(0) ? C(-1) : x * C(0); } };
struct Sigmoid { template <class C> __device__ C operator()(C x, C, C) const { return C(1) / (C(1) + exp_(-x)); } };
struct Tanh    { template <class C> __device__ C operator()(C x, C, C) const { return tanh_(x); } };
struct Relu    { template <class C> __device__ C operator()(C x, C, C) const { return x < C(0) ? C(0) : x; } };
struct Gelu    { template <class C> __device__ C operator()(C x, C, C) const { return C(0.5) * x * (C(1) + tanh_(C(0.7978845608028654) * (x + C(0.044715) * x * x * x))); } };
struct Pow     { template <class C> __device__ C operator()(C x, C p, C) const { return pow_(x, p); } };
struct AddS    { template <class C> __device__ C operator()(C x, C s, C) const { return x + s; } };
struct SubS    { template <class C> __device__ C operator()(C x, C s, C) const { return x - s; } };
struct MulS    { template <class C> __device__ C operator()(C x, C s, C) const { return x * s; } };
struct DivS    { template <class C> __device__ C operator()(C x, C s, C) const { return x / s; } };

struct Add         { template <class C> __device__ C operator()(C x, C y, C alpha, C) const { return x + alpha * y; } };
struct Sub         { template <class C> __device__ C operator()(C x, C y, C alpha, C) const { return x - alpha * y; } };
struct Mul         { template <class C> __device__ C operator()(C x, C y, C, C) const { return x * y; } };
struct Div         { template <class C> __device__ C operator()(C x, C y, C, C) const { return x / y; } };
struct SquaredDiff { template <class C> __device__ C operator()(C x, C y, C, C) const { return (x - y) * (x - y); } };
// clang-format on
}  // namespace op

template <typename T>
__device__ __forceinline__ compute_t<T> scalar_as(double v) {
  return compute_t<T>(v);
}

}  // namespace mt

// out[i] = f(x[i]). `vec`: every pointer is 16-byte aligned, so whole packs move at once
// (the n % pack tail goes to the grid's first threads). Exact in place (out == x) is fine.
template <typename T, typename Op>
__global__ void unary_op(T* out, const T* x, long long n, mt::OpScalars s, int vec) {
  using C = mt::compute_t<T>;
  const C a = mt::scalar_as<T>(s.a), b = mt::scalar_as<T>(s.b);
  const Op f{};
  const long long stride = mt::grid_stride();
  long long done = 0;
  if (vec) {
    using P = mt::Pack16<T>;
    const long long npack = n / P::size;
    const P* xp = reinterpret_cast<const P*>(x);
    P* op = reinterpret_cast<P*>(out);
    for (long long i = mt::global_thread_index(); i < npack; i += stride) {
      P v = xp[i];
      MT_UNROLL
      for (int k = 0; k < P::size; ++k)
        v.v[k] = mt::store_compute<T>(f(mt::load_compute(v.v[k]), a, b));
      op[i] = v;
    }
    done = npack * P::size;
  }
  for (long long i = done + mt::global_thread_index(); i < n; i += stride)
    out[i] = mt::store_compute<T>(f(mt::load_compute(x[i]), a, b));
}

template <typename T, typename Op, typename Index>
__device__ __forceinline__ void unary_strided_loop(T* out, const T* x, long long n, mt::OpScalars s,
                                                   const mt::StridedLayout& l) {
  using C = mt::compute_t<T>;
  const C a = mt::scalar_as<T>(s.a), b = mt::scalar_as<T>(s.b);
  const Op f{};
  for (long long i = mt::global_thread_index(); i < n; i += mt::grid_stride()) {
    long long off[2];
    mt::strided_offsets<2>(l, (Index)i, off);
    out[off[0]] = mt::store_compute<T>(f(mt::load_compute(x[off[1]]), a, b));
  }
}

// layout.strides[0] belongs to out, [1] to x.
template <typename T, typename Op>
__global__ void unary_op_strided(T* out, const T* x, long long n, mt::OpScalars s,
                                 mt::StridedLayout layout) {
  if (n <= 0xffffffffLL)
    unary_strided_loop<T, Op, unsigned>(out, x, n, s, layout);
  else
    unary_strided_loop<T, Op, unsigned long long>(out, x, n, s, layout);
}

// out[i] = f(x[i], y[i]) for i = first, first + step, ... below n (a thread's share of
// binary_op's grid or of a foreach block's chunk); in 16-byte packs when `vec` (every pointer
// aligned), then the n % pack tail element by element. out may be x.
template <typename T, typename Op>
__device__ __forceinline__ void binary_span(T* out, const T* x, const T* y, long long n,
                                            mt::compute_t<T> a, mt::compute_t<T> b, long long first,
                                            long long step, bool vec) {
  const Op f{};
  long long done = 0;
  if (vec) {
    using P = mt::Pack16<T>;
    const long long npack = n / P::size;
    const P* xp = reinterpret_cast<const P*>(x);
    const P* yp = reinterpret_cast<const P*>(y);
    P* op = reinterpret_cast<P*>(out);
    for (long long i = first; i < npack; i += step) {
      P u = xp[i];
      const P v = yp[i];
      MT_UNROLL
      for (int k = 0; k < P::size; ++k)
        u.v[k] = mt::store_compute<T>(f(mt::load_compute(u.v[k]), mt::load_compute(v.v[k]), a, b));
      op[i] = u;
    }
    done = npack * P::size;
  }
  for (long long i = done + first; i < n; i += step)
    out[i] = mt::store_compute<T>(f(mt::load_compute(x[i]), mt::load_compute(y[i]), a, b));
}

// out[i] = f(x[i], y[i]), all contiguous; `vec` as in unary_op.
template <typename T, typename Op>
__global__ void binary_op(T* out, const T* x, const T* y, long long n, mt::OpScalars s, int vec) {
  binary_span<T, Op>(out, x, y, n, mt::scalar_as<T>(s.a), mt::scalar_as<T>(s.b),
                     mt::global_thread_index(), mt::grid_stride(), vec != 0);
}

template <typename T, typename Op, typename Index>
__device__ __forceinline__ void binary_strided_loop(T* out, const T* x, const T* y, long long n,
                                                    mt::OpScalars s, const mt::StridedLayout& l) {
  using C = mt::compute_t<T>;
  const C a = mt::scalar_as<T>(s.a), b = mt::scalar_as<T>(s.b);
  const Op f{};
  for (long long i = mt::global_thread_index(); i < n; i += mt::grid_stride()) {
    long long off[3];
    mt::strided_offsets<3>(l, (Index)i, off);
    out[off[0]] =
        mt::store_compute<T>(f(mt::load_compute(x[off[1]]), mt::load_compute(y[off[2]]), a, b));
  }
}

// layout.strides[0] belongs to out, [1] to x, [2] to y (0 along a broadcast dim).
template <typename T, typename Op>
__global__ void binary_op_strided(T* out, const T* x, const T* y, long long n, mt::OpScalars s,
                                  mt::StridedLayout layout) {
  if (n <= 0xffffffffLL)
    binary_strided_loop<T, Op, unsigned>(out, x, y, n, s, layout);
  else
    binary_strided_loop<T, Op, unsigned long long>(out, x, y, n, s, layout);
}

// Note [Broadcast binary kernel]
// out[i] = f(x[i % mx], y[i % my]) over a contiguous out of n elements, each input contiguous
// with a period that divides n: n (same shape), 1 (one element), or the product of out's
// trailing dims (a bias row [N] against [M, N]). The inputs may have their own dtype
// (a bfloat16 matmul result plus a float32 bias, under autocast): each element is read in its
// own type and computed in out's compute type, as the host's conversion followed by the
// contiguous kernel would, without the converted copy or the strided kernel's index math.
// `vec`: out, and every input of period n, are aligned to their 16-byte-of-out packs.
// K elements of an input, read at once (out's packs are mt::Pack16; an input of another
// dtype reads the same K elements in fewer or more bytes).
template <typename T, int K>
struct alignas(sizeof(T) * K) PackOf {
  T v[K];
};

template <int K, typename C, typename TX>
__device__ __forceinline__ void bcast_load(const TX* x, long long i0, long long m, long long n,
                                           C (&v)[K]) {
  if (m == n) {
    const PackOf<TX, K> p = reinterpret_cast<const PackOf<TX, K>*>(x)[i0 / K];
    MT_UNROLL
    for (int k = 0; k < K; ++k) v[k] = C(mt::load_compute(p.v[k]));
  } else if (m == 1) {
    const C c = C(mt::load_compute(x[0]));
    MT_UNROLL
    for (int k = 0; k < K; ++k) v[k] = c;
  } else {
    long long j = i0 % m;
    MT_UNROLL
    for (int k = 0; k < K; ++k) {
      v[k] = C(mt::load_compute(x[j]));
      if (++j == m) j = 0;
    }
  }
}

template <typename T, typename TX, typename TY, typename Op>
__global__ void binary_op_bcast(T* out, const TX* x, const TY* y, long long n, mt::OpScalars s,
                                long long mx, long long my, int vec) {
  using C = mt::compute_t<T>;
  constexpr int K = mt::Pack16<T>::size;
  const C a = mt::scalar_as<T>(s.a), b = mt::scalar_as<T>(s.b);
  const Op f{};
  const long long stride = mt::grid_stride();
  long long done = 0;
  if (vec) {
    const long long npack = n / K;
    for (long long p = mt::global_thread_index(); p < npack; p += stride) {
      C xv[K], yv[K];
      bcast_load<K>(x, p * K, mx, n, xv);
      bcast_load<K>(y, p * K, my, n, yv);
      mt::Pack16<T> o;
      MT_UNROLL
      for (int k = 0; k < K; ++k) o.v[k] = mt::store_compute<T>(f(xv[k], yv[k], a, b));
      reinterpret_cast<mt::Pack16<T>*>(out)[p] = o;
    }
    done = npack * K;
  }
  for (long long i = done + mt::global_thread_index(); i < n; i += stride) {
    const C xi = C(mt::load_compute(x[mx == n ? i : i % mx]));
    const C yi = C(mt::load_compute(y[my == n ? i : i % my]));
    out[i] = mt::store_compute<T>(f(xi, yi, a, b));
  }
}

// Multi-tensor apply (Note [Multi-tensor apply] in layout.h): self[t] = f(self[t], other[t])
// for every pair of the table, block b on chunk table.block_chunk[b] of pair
// table.block_tensor[b]. Each pair is contiguous with one dtype T; a chunk moves in 16-byte
// packs when both of its pointers are aligned (chunks start at multiples of a pack).
template <typename T, typename Op>
__global__ void foreach_binary_op(mt::ForeachTable table, mt::OpScalars s) {
  const int t = table.block_tensor[blockIdx.x];
  const long long start = (long long)table.block_chunk[blockIdx.x] * mt::kForeachChunk;
  const long long left = table.numel[t] - start;
  T* x = static_cast<T*>(table.self[t]) + start;
  const T* y = static_cast<const T*>(table.other[t]) + start;
  binary_span<T, Op>(x, x, y, left < mt::kForeachChunk ? left : mt::kForeachChunk,
                     mt::scalar_as<T>(s.a), mt::scalar_as<T>(s.b), threadIdx.x, blockDim.x,
                     (((unsigned long long)x | (unsigned long long)y) & 15) == 0);
}
