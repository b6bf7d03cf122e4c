// SPDX-License-Identifier: MIT
// mt::silu's kernels of its own, one folder (kernels/ops/silu/): the CPU kernel of the fused
// backward (cpu.cpp), the CUDA kernels and their launchers on raw device pointers (cuda.cpp,
// device code silu.cu; the launchers also serve the benchmarks), and what the folder's
// entry in kernels/ops/folders.def points at: register_silu() (silu.cpp), the name
// expressions of silu.cu and the op harness's samples (samples.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cuda_device/layout.h"
#include "kernels/ops/folders.h"
#include "runtime/dtype.h"
#include "runtime/tensor.h"

struct CUstream_st;

namespace mt {

namespace cpu {
// Fused, one pass: out = grad * s * (1 + x * (1 - s)) with s = sigmoid(x); grad and x
// broadcast to out's shape, any strides (the loops of kernels/cpu/loops.h).
void silu_backward(const Tensor& grad, const Tensor& x, const Tensor& out);
}  // namespace cpu

namespace gpu {

// The CUDA kernels of mt::silu and mt::silu_backward: floating dtypes; grad is converted to
// x's dtype when they differ. Compute into out on x's device's current stream.
void silu(const Tensor& x, const Tensor& out);
void silu_backward(const Tensor& grad, const Tensor& x, const Tensor& out);

// On device pointers of cuda:device, on `stream`. n is the element count; a null layout
// means every operand is contiguous (then the vec kernel runs when all pointers are
// 16-byte aligned; Note [SiLU's launch shape] in kernels/jit/builtin.cpp).
void launch_silu_fwd(int device, CUstream_st* stream, DType t, const void* x, void* y, int64_t n,
                     const StridedLayout* layout = nullptr);
void launch_silu_bwd(int device, CUstream_st* stream, DType t, const void* grad, const void* x,
                     void* grad_in, int64_t n, const StridedLayout* layout = nullptr);

// The kernels of silu.cu: "silu_fwd_vec<float, 2>", "silu_bwd_strided<mt::Half>", ...
enum class SiluKernel { Fwd, FwdVec, FwdStrided, Bwd, BwdVec, BwdStrided };
inline constexpr int kSiluUnroll = 2;  // 16-byte packs per thread per loop of the vec kernels
inline constexpr DType kSiluDTypes[] = {DType::Float32, DType::Float64, DType::Float16,
                                        DType::BFloat16};
std::string silu_name_expression(SiluKernel k, DType t);

}  // namespace gpu

namespace ops {
// The folder's entry points, listed once in kernels/ops/folders.def.
void register_silu();                                      // mt::silu, mt::silu_backward
std::vector<jit::EmbeddedKernelFile> silu_kernel_files();  // silu.cu, every name expression
std::vector<OpSamples> silu_samples();  // mt::silu_backward's (mt::silu's: its row)
}  // namespace ops

}  // namespace mt
