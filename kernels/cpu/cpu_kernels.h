// SPDX-License-Identifier: MIT
// The CPU compute kernels behind the built-in ops. Each one writes into an output
// the caller has allocated with the right shape and dtype; the op files in
// kernels/ops/ do the shape and dtype logic, these only compute. Inputs may have
// any strides (views are read in place, never copied just for their layout).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "kernels/elementwise_rows.h"
#include "runtime/tensor.h"

namespace mt::cpu {

// Elementwise: the rows of kernels/elementwise_table.h, each computed with its CPU
// functor. Inputs broadcast to out's shape; the math happens in out's dtype (float32 for
// float16/bfloat16 outputs), so a caller that promotes int64 + float32 passes a float32
// out. out may be one of the inputs (in place), but must not partially overlap one.
using UnaryOp = ew::Fn;   // a row of Arity::Unary
using BinaryOp = ew::Fn;  // a row of Arity::Binary
void unary(UnaryOp op, const Tensor& x, const Tensor& out);
void pow_scalar(const Tensor& x, double exponent, const Tensor& out);

// out = a op (alpha * b) for Add and Sub, a op b for Mul and Div.
void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out, double alpha = 1);
// a op s, with the Scalar row of op's name (Add: AddS).
void binary_scalar(BinaryOp op, const Tensor& a, double s, const Tensor& out);
// out = cond ? a : b, all three broadcast to out's shape.
void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out);

// mse_loss's elementwise piece: out = (a - b)^2.
void squared_diff(const Tensor& a, const Tensor& b, const Tensor& out);

// Reductions over `dims` (wrapped, sorted, unique; empty means all). out has x's shape
// with those dims removed, or kept as size 1 with keepdim. Float inputs accumulate in
// float (float64 in double, int64 and bool in int64), float32 sums pairwise, and the
// result does not depend on the number of threads.
void sum(const Tensor& x, std::span<const int64_t> dims, bool keepdim, const Tensor& out);
void mean(const Tensor& x, std::span<const int64_t> dims, bool keepdim, const Tensor& out);
// The largest value; NaN wins over numbers, and ties go to the first index. indices
// (int64, out's shape, or undefined) gets the position in the reduced dims flattened
// in row-major order: for one dim, the index along it.
void max(const Tensor& x, std::span<const int64_t> dims, bool keepdim, const Tensor& out,
         const Tensor& indices_or_undefined);
// Reduces a broadcast gradient back to an input's shape: out (of `shape`) = grad
// summed over the dims that broadcasting `shape` to grad's shape expanded.
void sum_to(const Tensor& grad, const Shape& shape, const Tensor& out);

// out[..., m, n] = a[..., m, k] @ b[..., k, n]; the batch dims broadcast. float32 and
// float64 use cblas when the build found it and it runs kernels made for this CPU (Note
// [Which matmul kernel] in matmul.cpp; transposed views go in as trans flags), else the
// library's own packed GEMM (gemm.h); float16/bfloat16 compute in float32; int64 is blocked.
void matmul(const Tensor& a, const Tensor& b, const Tensor& out);

// Whether matmul calls cblas now: built with it, not turned off, and chosen.
bool have_blas();
void set_use_blas(bool use);  // true: MatmulKernel::Auto; false: MatmulKernel::Own
// Which float32/float64 matmul runs: Auto (cblas unless OpenBLAS runs old kernels on a CPU
// with AVX2/AVX-512, or as MT_MATMUL=blas/own says), cblas, or the library's own.
enum class MatmulKernel { Auto, Blas, Own };
void set_matmul_kernel(MatmulKernel kernel);  // Blas has no effect in a build without cblas
// The automatic choice, from OpenBLAS's core name ("" for another cblas), the CPU's
// AVX2/AVX-512 (with FMA) and MT_MATMUL's value (null when unset); why: "" or a reason.
struct MatmulChoice {
  bool blas;
  std::string why;
};
MatmulChoice choose_matmul_kernel(std::string_view blas_core, bool avx2, bool avx512,
                                  const char* env);
// The BLAS, the kernels it chose for this CPU, and which matmul runs and why ("OpenBLAS
// 0.3.21, kernels for Zen; matmul runs cblas"); minitensor doctor prints it.
std::string blas_info();

// Threads for the CPU kernels, matmul's included (1 to 1024; docs/cpu.md, "Threads"). By
// default MT_NUM_THREADS, else OMP_NUM_THREADS, at most the CPUs this process may run on;
// else those CPUs.
int num_threads();
void set_num_threads(int n);

}  // namespace mt::cpu
