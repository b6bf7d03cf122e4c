// SPDX-License-Identifier: MIT
// The CUDA compute kernels behind the built-in ops: the GPU twins of kernels/cpu's
// functions, with the same contracts (the op files in kernels/ops/ allocate out with the
// right shape and dtype; these compute into it on the device's current stream). Device
// code is kernels/cuda_device/*.cu, compiled by NVRTC on first use (kernels/jit). Inputs may be
// strided or broadcast; they are read in place where the kernel can (elementwise), and
// copied to a contiguous layout where it cannot (reductions over non-adjacent dims).
// A build without CUDA compiles these too; a call that gets a CUDA tensor anyway says the
// build has no CUDA backend.
#pragma once

#include <cstdint>
#include <span>

#include "kernels/elementwise_rows.h"
#include "runtime/tensor.h"

namespace mt::gpu {

using UnaryOp = ew::Fn;   // a row of Arity::Unary (as cpu::UnaryOp)
using BinaryOp = ew::Fn;  // a row of Arity::Binary

// Elementwise, the rows of kernels/elementwise_table.h: inputs broadcast to out's shape
// and are converted to out's dtype first when they differ (one extra pass; the kernels
// take one dtype). Math in float for the 16-bit types. int64 works for the kInt rows
// (neg, abs, sign, relu, pow, add, sub, mul); bool goes through int64.
void unary(UnaryOp op, const Tensor& x, const Tensor& out);
void pow_scalar(const Tensor& x, double exponent, const Tensor& out);
void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out, double alpha = 1);
void binary_scalar(BinaryOp op, const Tensor& a, double s, const Tensor& out);
// self[i] = self[i] op alpha * other[i] for every pair (the caller checked the pairs: one
// shape, one device, castable dtypes): contiguous pairs of one dtype in one multi-tensor
// launch (Note [Multi-tensor apply] in kernels/cuda_device/layout.h), others one by one.
void foreach_binary_(BinaryOp op, std::span<const Tensor> self, std::span<const Tensor> other,
                     double alpha);

// Reductions, as cpu::sum/mean/max/sum_to (dims wrapped, sorted, unique; empty: all).
// out (and indices) must be contiguous. Deterministic: the order of the additions
// depends on the shape only.
void sum(const Tensor& x, std::span<const int64_t> dims, bool keepdim, const Tensor& out);
void mean(const Tensor& x, std::span<const int64_t> dims, bool keepdim, const Tensor& out);
void max(const Tensor& x, std::span<const int64_t> dims, bool keepdim, const Tensor& out,
         const Tensor& indices_or_undefined);
void sum_to(const Tensor& grad, const Shape& shape, const Tensor& out);

// out[..., m, n] = a[..., m, k] @ b[..., k, n] through cuBLAS (libcublas opened with
// dlopen on first use); batch dims broadcast. float32 computes in full float32 unless
// set_allow_tf32(true); float16/bfloat16 accumulate in float32. int64 is refused.
void matmul(const Tensor& a, const Tensor& b, const Tensor& out);
void set_allow_tf32(bool allow);
bool allow_tf32();
// Whether cuBLAS could be loaded, and why not.
bool cublas_available();
std::string cublas_unavailable_reason();

// Fills t (on a CUDA device) with draws of the counter-based generator: element i uses
// counters base + i (uniform in [0, 1)) or base + 2i and base + 2i + 1 (normal, Box-Muller),
// exactly the stream mt::rand and mt::randn make on the CPU.
void random(const Tensor& t, uint64_t seed, uint64_t base, bool normal);

// Installs the runtime's copy, fill and random kernels (cuda::set_copy_kernel, ...;
// kernels/cuda_host/device_hooks.cpp). Run once by the library's initialization.
void install_device_hooks();

}  // namespace mt::gpu
