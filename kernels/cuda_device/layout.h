// SPDX-License-Identifier: MIT
// StridedLayout: sizes and per-operand strides of a strided elementwise kernel.
// Plain C++ shared by the host (kernels/jit/builtin.cpp) and the NVRTC kernels,
// so both sides agree on the layout of the struct passed by value.
#pragma once

namespace mt {

constexpr int kMaxKernelDims = 8;  // as many as a tensor has (runtime/tensor.h)
constexpr int kMaxKernelOperands = 3;

// Strides are in elements. Operand 0 is the output; the others follow the
// kernel's pointer arguments in order (silu_fwd_strided: y, x).
struct StridedLayout {
  int ndim;
  int pad_;
  long long sizes[kMaxKernelDims];
  long long strides[kMaxKernelOperands][kMaxKernelDims];
};

// Note [Multi-tensor apply]
// A foreach op (mt::foreach_add_) runs over a list of tensor pairs in one launch: the
// host cuts each pair into chunks of kForeachChunk elements and gives every block one
// chunk, through this table passed by value as the kernel's parameter (CUDA's 4 KiB
// limit on a launch's parameters: this struct is 3,136 bytes). A list with more tensors
// or chunks than fit takes several launches, one a table. A tensor index fits a byte.
constexpr int kForeachMaxTensors = 64;
constexpr int kForeachMaxBlocks = 320;
constexpr long long kForeachChunk = 16384;  // elements; a multiple of every 16-byte pack

struct ForeachTable {
  void* self[kForeachMaxTensors];  // written in place
  const void* other[kForeachMaxTensors];
  long long numel[kForeachMaxTensors];
  int block_chunk[kForeachMaxBlocks];             // block b works on chunk block_chunk[b] ...
  unsigned char block_tensor[kForeachMaxBlocks];  // ... of pair block_tensor[b]
};

}  // namespace mt
