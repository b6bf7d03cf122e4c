// SPDX-License-Identifier: MIT
// The built-in op library: each is a dispatched op "mt::<name>" (kernels/ops/*.cpp),
// with CPU, CUDA and Fake kernels and a backward written with dispatched ops.
#pragma once

#include <optional>
#include <tuple>
#include <vector>

#include "runtime/tensor.h"

namespace mt {

// Elementwise, with broadcasting and type promotion.
Tensor add(const Tensor& a, const Tensor& b, double alpha = 1);
Tensor sub(const Tensor& a, const Tensor& b, double alpha = 1);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, double b);
Tensor sub(const Tensor& a, double b);
Tensor mul(const Tensor& a, double b);
Tensor div(const Tensor& a, double b);
Tensor pow(const Tensor& x, double exponent);

// The unary elementwise ops, one Unary row each of MT_ELEMENTWISE_OPS in
// kernels/elementwise_table.h, whose forward expression is what they compute (shown
// beside each). `minitensor ops --namespace mt` lists them with their schemas. Float-valued
// ones give float32 for integer inputs; neg, abs, sign, relu and silu keep the dtype.
Tensor neg(const Tensor& x);      // -x
Tensor exp(const Tensor& x);      // exp(x)
Tensor log(const Tensor& x);      // log(x)
Tensor sqrt(const Tensor& x);     // sqrt(x)
Tensor abs(const Tensor& x);      // abs(x)
Tensor sign(const Tensor& x);     // 1, -1 or 0 (NaN stays NaN)
Tensor sigmoid(const Tensor& x);  // 1 / (1 + exp(-x))
Tensor tanh(const Tensor& x);     // tanh(x)
Tensor relu(const Tensor& x);     // x < 0 ? 0 : x (NaN stays NaN)
Tensor silu(const Tensor& x);     // x / (1 + exp(-x)), kernels of its own (kernels/ops/silu/)
Tensor gelu(const Tensor& x);     // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))

// The fused SiLU gradient: grad * s * (1 + x * (1 - s)), s = sigmoid(x), in one pass.
Tensor silu_backward(const Tensor& grad, const Tensor& x);

// In place (bump the version counter; refused on tensors that need grad while recording).
const Tensor& add_(const Tensor& self, const Tensor& other, double alpha = 1);
const Tensor& sub_(const Tensor& self, const Tensor& other, double alpha = 1);
const Tensor& mul_(const Tensor& self, const Tensor& other);
const Tensor& mul_(const Tensor& self, double other);
// self[i] += alpha * other[i] for every pair (PyTorch's _foreach_add_): lists of one length,
// each pair of one shape and on one device; on CUDA one launch for the whole list. An
// optimizer step: call it under mt::NoGradGuard when the parameters require grad.
void foreach_add_(const std::vector<Tensor>& self, const std::vector<Tensor>& other,
                  double alpha = 1);

// Reductions. Empty dims reduce over everything.
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor max(const Tensor& x);
std::tuple<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim = false);
// Sums a broadcast gradient back down to `shape`.
Tensor sum_to(const Tensor& x, const Shape& shape);

// The gradients of Tensor::slice and Tensor::select: grad written into zeros of input_sizes.
Tensor slice_backward(const Tensor& grad, const std::vector<int64_t>& input_sizes, int64_t dim,
                      int64_t start, int64_t end, int64_t step);
Tensor select_backward(const Tensor& grad, const std::vector<int64_t>& input_sizes, int64_t dim,
                       int64_t index);

Tensor matmul(const Tensor& a, const Tensor& b);
Tensor mse_loss(const Tensor& input, const Tensor& target);  // mean reduction
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);

inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator+(const Tensor& a, double b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, double b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, double b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, double b) { return div(a, b); }
inline Tensor operator*(double a, const Tensor& b) { return mul(b, a); }
inline Tensor operator-(const Tensor& a) { return neg(a); }

}  // namespace mt

// Process-wide settings of the built-in kernels (kernels/ops/settings.cpp forwards them to
// the CPU kernels and the GPU launchers).
namespace mt {

// Threads for the CPU kernels, matmul's included (1 to 1024; docs/cpu.md, "Threads"). By
// default MT_NUM_THREADS, else OMP_NUM_THREADS, at most the CPUs this process may run on;
// else those CPUs.
int num_threads();
void set_num_threads(int n);

// Whether matmul calls cblas: built with it and not turned off.
bool have_blas();
void set_use_blas(bool use);  // no effect in a build without cblas

}  // namespace mt

namespace mt::cuda {

// float32 matmul on CUDA through cuBLAS may use TF32 tensor cores (faster, 10-bit
// mantissa products) when allowed; off by default, as in PyTorch.
void set_allow_tf32(bool allow);
bool allow_tf32();

}  // namespace mt::cuda
