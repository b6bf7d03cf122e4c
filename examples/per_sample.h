// SPDX-License-Identifier: MIT
// Per-sample gradients of examples/mlp.h's MLP: through mt::vmap over mt::grad (one
// batched forward and backward), and as a loop of one mt::grad call per sample. Used by
// examples/per_sample_grads.cpp and `minitensor bench vmap`.
#pragma once

#include <vector>

#include "examples/mlp.h"
#include "minitensor.h"

namespace mlp {

// Sample i's loss: mse_loss of the model on x[i] against target[i].
inline mt::Tensor sample_loss(const Model& m, const mt::Tensor& x, const mt::Tensor& target) {
  return mt::mse_loss(forward(m, x), target);
}

// One tensor a parameter, [batch, ...parameter's shape]: row i is d loss_i / d parameter.
inline std::vector<mt::Tensor> per_sample_grads_vmap(const Model& m, const mt::Tensor& x,
                                                     const mt::Tensor& target) {
  auto per_sample = mt::vmap([&](const std::vector<mt::Tensor>& a) {
    return mt::grad({sample_loss(m, a[0], a[1])}, m.params());
  });
  return per_sample({x, target});
}

inline std::vector<std::vector<mt::Tensor>> per_sample_grads_loop(const Model& m,
                                                                  const mt::Tensor& x,
                                                                  const mt::Tensor& target) {
  std::vector<std::vector<mt::Tensor>> out;
  for (int64_t i = 0; i < x.size(0); ++i)
    out.push_back(mt::grad({sample_loss(m, x.select(0, i), target.select(0, i))}, m.params()));
  return out;
}

}  // namespace mlp
