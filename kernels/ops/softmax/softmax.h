// SPDX-License-Identifier: MIT
// mt::softmax and mt::log_softmax, kernels of their own, one folder (kernels/ops/softmax/):
// the CPU kernels (cpu.cpp), the CUDA kernels (cuda.cpp, device code softmax.cu), and what
// the folder's entry in kernels/ops/folders.def points at: register_softmax()
// (softmax.cpp), the name expressions of softmax.cu and the op harness's samples
// (samples.cpp). Their vmap rules and autocast policy are with the others'
// (kernels/ops/batching.cpp, kernels/ops/autocast_policies.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/ops/folders.h"
#include "runtime/dtype.h"
#include "runtime/tensor.h"

namespace mt {

// Along `dim` (may be negative), numerically stable (the row's max is subtracted), into
// out (x's shape, a floating dtype).
namespace cpu {
void softmax(const Tensor& x, int64_t dim, const Tensor& out);
void log_softmax(const Tensor& x, int64_t dim, const Tensor& out);
}  // namespace cpu
namespace gpu {
void softmax(const Tensor& x, int64_t dim, const Tensor& out);
void log_softmax(const Tensor& x, int64_t dim, const Tensor& out);
// "softmax_rows<float, false>": the kernel of softmax.cu for dtype t.
std::string softmax_name_expression(DType t, bool log);
}  // namespace gpu

namespace ops {
// The folder's entry points, listed once in kernels/ops/folders.def.
void register_softmax();                                      // mt::softmax, mt::log_softmax
std::vector<jit::EmbeddedKernelFile> softmax_kernel_files();  // softmax.cu
std::vector<OpSamples> softmax_samples();
}  // namespace ops

}  // namespace mt
