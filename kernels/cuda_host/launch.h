// SPDX-License-Identifier: MIT
// What the GPU kernels' host code shares: the stream of a tensor's device, shapes as
// spans, broadcast strides, and device-side dtype conversion.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/tensor.h"

struct CUstream_st;

namespace mt::gpu::detail {

// The current stream of t's device (runtime/cuda/driver.h), where all of t's work goes.
CUstream_st* stream_of(const Tensor& t);

inline std::span<const int64_t> span_of(const Shape& s) { return {s.data(), s.size()}; }

// t's strides for reading it as `shape` (t broadcasts to it): 0 along the dims that
// broadcasting adds or expands from 1.
std::vector<int64_t> broadcast_strides(const Tensor& t, const Shape& shape);

// x itself if it has dtype t, else a new contiguous copy converted on the device.
Tensor converted(const Tensor& x, DType t);

// The message for a CUDA kernel given a tensor on another device.
void check_cuda(const Tensor& t, const char* op);

}  // namespace mt::gpu::detail
