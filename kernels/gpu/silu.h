// SPDX-License-Identifier: MIT
// The launchers of SiLU's device kernels (kernels/cuda/silu.cu) on raw device pointers,
// for gpu::silu and gpu::silu_backward (kernels/gpu/silu.cpp) and for the benchmarks.
#pragma once

#include <cstdint>

#include "kernels/cuda/layout.h"
#include "runtime/dtype.h"

struct CUstream_st;

namespace mt::gpu {

// On device pointers of cuda:device, on `stream`. n is the element count; a null layout
// means every operand is contiguous (then the vec kernel runs when all pointers are
// 16-byte aligned; Note [SiLU's launch shape] in kernels/jit/builtin.cpp).
void launch_silu_fwd(int device, CUstream_st* stream, DType t, const void* x, void* y, int64_t n,
                     const StridedLayout* layout = nullptr);
void launch_silu_bwd(int device, CUstream_st* stream, DType t, const void* grad, const void* x,
                     void* grad_in, int64_t n, const StridedLayout* layout = nullptr);

}  // namespace mt::gpu
