// SPDX-License-Identifier: MIT
// StridedLayout: sizes and per-operand strides of a strided elementwise kernel.
// Plain C++ shared by the host (kernels/jit/builtin.cpp) and the NVRTC kernels,
// so both sides agree on the layout of the struct passed by value.
#pragma once

namespace mt {

constexpr int kMaxKernelDims = 8;  // as many as a tensor has (runtime/shape.h)
constexpr int kMaxKernelOperands = 3;

// Strides are in elements. Operand 0 is the output; the others follow the
// kernel's pointer arguments in order (silu_fwd_strided: y, x).
struct StridedLayout {
  int ndim;
  int pad_;
  long long sizes[kMaxKernelDims];
  long long strides[kMaxKernelOperands][kMaxKernelDims];
};

}  // namespace mt
