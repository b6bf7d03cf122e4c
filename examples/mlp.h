// SPDX-License-Identifier: MIT
// A two-layer MLP with SiLU, y = silu(x W1 + b1) W2 + b2, trained with MSE and plain SGD.
// Public API only and device-agnostic: parameters and data are drawn on the CPU (so a
// seed gives the same numbers on every device) and moved with .to(device).
// Used by examples/mlp_train.cpp and `minitensor bench mlp`.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "minitensor.h"

namespace mlp {

struct Shape {
  int64_t batch = 64, in = 32, hidden = 64, out = 1;
};

struct Model {
  mt::Tensor w1, b1, w2, b2;  // [in, hidden], [hidden], [hidden, out], [out]
  std::vector<mt::Tensor> params() const { return {w1, b1, w2, b2}; }
};

// Weights ~ N(0, 1/fan_in), zero biases, from the global generator (mt::manual_seed).
inline Model init(const Shape& s, mt::Device device) {
  const double scale1 = 1.0 / std::sqrt(double(s.in)), scale2 = 1.0 / std::sqrt(double(s.hidden));
  Model m;
  m.w1 = mt::mul(mt::randn({s.in, s.hidden}), scale1).to(device).requires_grad_();
  m.b1 = mt::zeros({s.hidden}).to(device).requires_grad_();
  m.w2 = mt::mul(mt::randn({s.hidden, s.out}), scale2).to(device).requires_grad_();
  m.b2 = mt::zeros({s.out}).to(device).requires_grad_();
  return m;
}

inline mt::Tensor forward(const Model& m, const mt::Tensor& x) {
  mt::Tensor h = mt::silu(mt::add(mt::matmul(x, m.w1), m.b1));
  return mt::add(mt::matmul(h, m.w2), m.b2);
}

// How the SGD update runs: one foreach_add_ over every parameter (one launch on CUDA), or
// one sub_ a parameter (kept for `minitensor bench mlp --sgd loop`, the A/B of the two).
enum class Sgd { Foreach, Loop };

// One training step: forward, mse_loss, backward, p += -lr * p.grad under NoGradGuard,
// then the grads cleared. Returns the loss (on the device: reading it waits for the step).
inline mt::Tensor train_step(Model& m, const mt::Tensor& x, const mt::Tensor& target, double lr,
                             Sgd sgd = Sgd::Foreach) {
  mt::Tensor loss = mt::mse_loss(forward(m, x), target);
  mt::backward(loss);
  const std::vector<mt::Tensor> params = m.params();
  {
    mt::NoGradGuard no_grad;  // the parameters require grad: an in-place update is not recorded
    if (sgd == Sgd::Foreach) {
      std::vector<mt::Tensor> grads;
      grads.reserve(params.size());
      for (const mt::Tensor& p : params) grads.push_back(p.grad());
      mt::foreach_add_(params, grads, -lr);
    } else {
      for (const mt::Tensor& p : params) mt::sub_(p, p.grad(), lr);
    }
  }
  mt::zero_grad(params);
  return loss;
}

struct Task {
  mt::Tensor x, target;  // [batch, in], [batch, out]
};

// A synthetic regression task: a fixed random teacher's outputs silu(x) T plus a little
// noise, from the global generator (draw it before init for the example's numbers).
inline Task teacher_task(const Shape& s, mt::Device device) {
  mt::Tensor x = mt::randn({s.batch, s.in});
  mt::Tensor teacher = mt::randn({s.in, s.out});
  mt::Tensor target =
      mt::add(mt::matmul(mt::silu(x), teacher), mt::mul(mt::randn({s.batch, s.out}), 0.01));
  return {x.to(device), target.to(device)};
}

}  // namespace mlp
