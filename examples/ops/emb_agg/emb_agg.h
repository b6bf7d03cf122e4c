// SPDX-License-Identifier: MIT
// deeprec::emb_agg: embedding-bag aggregation for recommender models as a user's custom op
//   emb_agg(Tensor weight, Tensor indices, Tensor offsets, str mode="sum",
//           Tensor? per_sample_weights=None, bool include_last_offset=False,
//           bool deterministic=False) -> Tensor
// with torch.nn.functional.embedding_bag's semantics: bag b sums (or averages) the rows
// weight[indices[offsets[b] .. offsets[b + 1])]; the last bag runs to the end of indices,
// or to the final offset when include_last_offset; empty bags give zeros; per-sample
// weights scale each row (mode "sum" only). weight float32, float64 or bfloat16 [V, D]
// (bfloat16 sums in float and rounds once); indices and offsets int64 (the runtime has no
// int32). Gradients for weight and per_sample_weights; on CUDA the weight gradient is by
// atomics unless `deterministic` (or bfloat16): then by sorted segments, the same bits on
// every run (Note [Which weight gradient] in emb_agg.cpp).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "minitensor.h"

namespace deeprec {

mt::Tensor emb_agg(const mt::Tensor& weight, const mt::Tensor& indices, const mt::Tensor& offsets,
                   const std::string& mode = "sum",
                   const std::optional<mt::Tensor>& per_sample_weights = std::nullopt,
                   bool include_last_offset = false, bool deterministic = false);
const mt::OperatorHandle& emb_agg_handle();

// The CUDA kernels, for the tests (the Seg* and Sort* ones: Note [Sorted-segment backward]
// in emb_agg.cu). BackwardWeight* have no bfloat16 version.
enum class EmbAggKernel {
  Forward,
  ForwardVec4,
  BackwardWeight,
  BackwardWeightVec4,
  BackwardPsw,
  SegReduce,
  SegReduceVec4,
  SegInit,
  SortHist,
  SortScan,
  SortScatter,
  SegStarts
};
const mt::jit::UserKernel& emb_agg_kernel(mt::DType dtype, EmbAggKernel which);
// Checks the arguments the op launches each kernel with for CPU tensors of these shapes
// against the kernels compiled for `arch`, without a GPU.
void emb_agg_check_launch(int arch, const mt::Tensor& weight, const mt::Tensor& indices,
                          const mt::Tensor& offsets, const std::string& mode,
                          const std::optional<mt::Tensor>& per_sample_weights,
                          bool include_last_offset);

// The sorted-segment weight gradient's launches (mode sum, no per-sample weights) on CUDA
// tensors, one by one, each timed by CUDA events: (kernel, ms) in launch order, for the
// bench's breakdown.
std::vector<std::pair<std::string, double>> emb_agg_segment_profile(const mt::Tensor& weight,
                                                                    const mt::Tensor& indices,
                                                                    const mt::Tensor& offsets,
                                                                    const mt::Tensor& grad);

}  // namespace deeprec
