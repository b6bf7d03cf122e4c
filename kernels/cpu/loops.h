// SPDX-License-Identifier: MIT
// The elementwise loop helper of the CPU kernels (PyTorch's TensorIterator idea, small):
// broadcast the inputs to out's shape, drop and merge dims, then run a kernel written
// as one plain loop over n contiguous elements of the compute type.
//
// Note [Elementwise loops]
// A kernel is f(C* out, const C* const* in, int64_t n): a loop over raw pointers that
// the compiler vectorizes. MT_SIMD (OpenMP's simd) is what makes GCC do it at -O2, whose
// cost model otherwise skips loops of unknown length, and it also says that out may be
// an input. Checked with g++ 12 -O2 -fopenmp -fopt-info-vec-optimized: the float and
// double loops of neg, abs, relu, exp, sigmoid, silu, add/sub/mul/div and their scalar
// forms, pow by 0/1/2/3/-1/-2, silu_backward and the mse pieces report "loop vectorized
// using 16 byte vectors" (32 in the x86-64-v3 clones); log, sqrt, tanh and a general pow
// call libm and stay scalar, as do where and int64 relu (SSE2 has no 64-bit compare).
// for_each_block calls it
//  - on whole chunks of the raw tensors when every operand is contiguous with out's
//    dtype (the fast path: no copies, no index math), else
//  - per inner row, in blocks of kBlock elements: an operand whose row is contiguous
//    and of the compute type is passed as is; others (strided, broadcast, float16,
//    bfloat16, another dtype) are loaded into a stack buffer in the compute type, and
//    a non-contiguous or 16-bit out is written back from one. So views are read in
//    place with their strides, never copied whole.
// The compute type C is float for float32/float16/bfloat16, double for float64, and
// int64_t for int64 and bool (stored back as value != 0).
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <initializer_list>
#include <type_traits>

#include "runtime/tensor.h"

// Asks the compiler to vectorize the next loop and promises it has no dependence
// between iterations (OpenMP's simd construct; ignored without -fopenmp).
#define MT_PRAGMA(x) _Pragma(#x)
#define MT_SIMD MT_PRAGMA(omp simd)
#define MT_SIMD_SUM(var) MT_PRAGMA(omp simd reduction(+ : var))

// Note [ISA clones]
// Loops whose cost is arithmetic rather than memory (exp, sigmoid, SiLU and its backward,
// the tile evaluator's nodes) are compiled three times, for x86-64-v4 (AVX-512),
// x86-64-v3 (AVX2: 8 float lanes, and the integer min/max that exp_f32's clamps use)
// and the baseline (SSE2); the dynamic loader picks one for the CPU it runs on (GCC's
// target_clones, an ifunc). SiLU on one core of a 2-core AMD EPYC VM, in cache: about
// 2.6 ns/element for SSE2, 0.7 for v3, 0.35 for v4.
// Memory-bound loops keep one version; the packed GEMM picks its micro-kernel itself
// (kernels/cpu/gemm.cpp). Define MT_NO_ISA_CLONES for the baseline only.
#if defined(__x86_64__) && defined(__GLIBC__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(MT_NO_ISA_CLONES)
#define MT_ISA_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define MT_ISA_CLONES
#endif

namespace mt::cpu {

int num_threads();

// Work below this many elements runs on the calling thread: waking a second one costs a
// few microseconds, about what 32K simple elements take.
inline constexpr int64_t kGrainSize = 32768;

namespace detail {
using RangeFn = void (*)(void* ctx, int64_t begin, int64_t end);
void parallel_for_impl(int64_t n, int64_t grain, RangeFn fn, void* ctx);
// The default thread count: MT_NUM_THREADS, else OMP_NUM_THREADS (its first number), at
// most the CPUs this process may run on; else those CPUs. Values that are not positive
// integers are ignored.
int threads_from_environment();
// The pool's pause after a job, in parallel loops to run on the caller alone (Note [The
// CPU thread pool]): given the current one, the job's time, the caller's time in its own
// chunks and their count, and all the chunks. Times in nanoseconds.
int64_t next_backoff(int64_t backoff, int64_t job, int64_t callers, int64_t callers_chunks,
                     int64_t chunks);
// Rethrows e as an mt::Error (an mt::Error as it is; std::bad_alloc as "out of memory").
[[noreturn, gnu::cold]] void rethrow_as_error(std::exception_ptr e);
}  // namespace detail

// Calls f(begin, end) on pieces that cover [0, n) once: on this thread when n <= grain,
// else in chunks of at least `grain` items on up to num_threads() threads of the library's
// pool (Note [The CPU thread pool] in thread_pool.cpp), this one included. f must not
// depend on how [0, n) is cut. An exception f throws, on any thread, stops the loop and
// comes out of parallel_for as an mt::Error (std::bad_alloc as "[cpu] out of memory ...").
template <typename F>
void parallel_for(int64_t n, int64_t grain, F&& f) {
  if (n <= 0) return;
  using Fn = std::remove_reference_t<F>;
  if (n <= grain || num_threads() == 1) {
    try {
      return f(int64_t(0), n);
    } catch (...) {
      detail::rethrow_as_error(std::current_exception());
    }
  }
  detail::parallel_for_impl(
      n, grain, [](void* c, int64_t b, int64_t e) { (*static_cast<Fn*>(c))(b, e); }, &f);
}

// Storage type <-> compute type.
template <typename C>
inline constexpr DType compute_storage_v = dtype_v<C>;  // float, double, int64_t
// Calls fn(C{}) with the compute type of dtype t.
template <typename Fn>
decltype(auto) visit_compute(DType t, Fn&& fn) {
  switch (t) {
    case DType::Float32:
    case DType::Float16:
    case DType::BFloat16:
      return fn(float{});
    case DType::Float64:
      return fn(double{});
    case DType::Int64:
    case DType::Bool:
      return fn(int64_t{});
  }
  MT_ASSERT(false, "unknown dtype {}", int(t));
  return fn(float{});
}

// Converting copies between a strided row of any dtype and a contiguous buffer of C.
// Strides are in bytes; a stride of 0 broadcasts one element.
template <typename C>
void load_row(DType src, const char* p, int64_t stride, int64_t n, C* dst);
template <typename C>
void store_row(DType dst, char* p, int64_t stride, int64_t n, const C* src);

// An elementwise problem after broadcasting, dim dropping and merging. Operand 0 is out.
struct Loop {
  static constexpr int kMaxOperands = 4;
  int nops = 0;
  int ndim = 0;  // dim ndim-1 is the innermost (smallest stride of out)
  int64_t numel = 0;
  // Only the first ndim sizes and, per operand, strides are set (zeroing all of them cost
  // more than the rest of make_loop for a small tensor).
  int64_t sizes[kMaxDims];
  int64_t strides[kMaxOperands][kMaxDims];  // bytes
  char* data[kMaxOperands] = {};
  DType dtype[kMaxOperands] = {};
  bool contiguous = false;  // every operand dense in the same order, with out's dtype
};

// Checks that out is a writable CPU tensor without overlapping elements and that each
// input is a CPU tensor that broadcasts to out's shape; `op` names the caller in errors.
// The inputs are referenced, not copied (a copy is two atomic reference-count updates).
Loop make_loop(const char* op, const Tensor& out,
               std::initializer_list<std::reference_wrapper<const Tensor>> inputs);

// Calls f(ptrs, n) for the rows of linear elements [begin, end): ptrs[k] points at the
// first element of operand k; the row continues with stride it.strides[k][ndim-1].
template <typename F>
void for_each_row(const Loop& it, int64_t begin, int64_t end, F&& f) {
  char* ptrs[Loop::kMaxOperands];
  if (it.ndim == 0) {
    for (int k = 0; k < it.nops; ++k) ptrs[k] = it.data[k];
    return f(ptrs, int64_t(1));
  }
  const int nd = it.ndim;
  int64_t idx[kMaxDims];
  int64_t rem = begin;
  for (int d = nd - 1; d >= 0; --d) {
    idx[d] = rem % it.sizes[d];
    rem /= it.sizes[d];
  }
  for (int k = 0; k < it.nops; ++k) {
    ptrs[k] = it.data[k];
    for (int d = 0; d < nd; ++d) ptrs[k] += idx[d] * it.strides[k][d];
  }
  const int64_t inner = it.sizes[nd - 1];
  int64_t i = begin;
  while (i < end) {
    int64_t n = std::min(inner - idx[nd - 1], end - i);
    f(ptrs, n);
    i += n;
    if (i >= end) break;
    // The row is done (ptrs still point at where it started): back to its first
    // element, then carry into the outer dims.
    for (int k = 0; k < it.nops; ++k) ptrs[k] -= idx[nd - 1] * it.strides[k][nd - 1];
    idx[nd - 1] = 0;
    for (int d = nd - 2; d >= 0; --d) {
      if (++idx[d] < it.sizes[d]) {
        for (int k = 0; k < it.nops; ++k) ptrs[k] += it.strides[k][d];
        break;
      }
      for (int k = 0; k < it.nops; ++k) ptrs[k] -= (it.sizes[d] - 1) * it.strides[k][d];
      idx[d] = 0;
    }
  }
}

inline constexpr int64_t kBlock = 256;

// Runs the kernel f(C* out, const C* const* in, int64_t n) over every element of `it`
// (Note [Elementwise loops]), on several threads for large tensors.
template <typename C, typename F>
void for_each_block(const Loop& it, F&& f) {
  constexpr DType kC = compute_storage_v<C>;
  const int nin = it.nops - 1;
  if (it.contiguous && it.dtype[0] == kC) {
    parallel_for(it.numel, kGrainSize, [&](int64_t b, int64_t e) {
      const C* in[Loop::kMaxOperands] = {};
      for (int k = 0; k < nin; ++k) in[k] = reinterpret_cast<const C*>(it.data[k + 1]) + b;
      f(reinterpret_cast<C*>(it.data[0]) + b, in, e - b);
    });
    return;
  }
  const int nd = it.ndim;
  parallel_for(it.numel, kGrainSize, [&](int64_t b, int64_t e) {
    alignas(64) C buf[Loop::kMaxOperands][kBlock];
    const C* in[Loop::kMaxOperands] = {};
    for_each_row(it, b, e, [&](char* const* ptrs, int64_t n) {
      int64_t st[Loop::kMaxOperands];
      for (int k = 0; k < it.nops; ++k) st[k] = nd ? it.strides[k][nd - 1] : 0;
      const bool direct_out = it.dtype[0] == kC && st[0] == int64_t(sizeof(C));
      for (int64_t off = 0; off < n; off += kBlock) {
        const int64_t m = std::min(kBlock, n - off);
        for (int k = 0; k < nin; ++k) {
          const char* p = ptrs[k + 1] + off * st[k + 1];
          if (it.dtype[k + 1] == kC && st[k + 1] == int64_t(sizeof(C))) {
            in[k] = reinterpret_cast<const C*>(p);
          } else {
            load_row<C>(it.dtype[k + 1], p, st[k + 1], m, buf[k + 1]);
            in[k] = buf[k + 1];
          }
        }
        char* o = ptrs[0] + off * st[0];
        if (direct_out) {
          f(reinterpret_cast<C*>(o), in, m);
        } else {
          f(buf[0], in, m);
          store_row<C>(it.dtype[0], o, st[0], m, buf[0]);
        }
      }
    });
  });
}

}  // namespace mt::cpu
