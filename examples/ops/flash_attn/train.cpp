// SPDX-License-Identifier: MIT
// Trains one single-head attention layer end to end with mha::flash_attn: x [B, S, E] ->
// q, k, v = x Wq, x Wk, x Wv -> flash_attn (causal) -> out Wo, MSE against the output of a
// teacher layer of the same form with other weights, plain SGD on Wq, Wk, Wv, Wo (B = 4
// sequences of S = 256, E = 64). On cuda:0 the attention runs in bfloat16 on the
// tensor-core kernels, the projections in float32; without a GPU the same program runs on
// the CPU in float32. Fails (exit 1) unless the loss falls below half its start.
//   build/examples/ops/flash_attn/flash_attn_train [steps (200)] [learning rate (5)]
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "flash_attn.h"

using namespace mt;

namespace {

struct Layer {
  Tensor wq, wk, wv, wo;
  std::vector<Tensor> params() const { return {wq, wk, wv, wo}; }
};

Layer make_layer(int64_t E, const Device& dev, bool grad) {
  auto w = [&] {
    Tensor t = mul(randn({E, E}), 1.0 / std::sqrt(double(E))).to(dev);
    return grad ? t.requires_grad_() : t;
  };
  return {w(), w(), w(), w()};
}

// [B * S, E] -> [B * S, E] through one causal attention head over sequences of S.
Tensor attention_layer(const Layer& l, const Tensor& x, int64_t B, int64_t S, DType attn_dtype) {
  const int64_t E = x.sizes()[1];
  auto head = [&](const Tensor& w) { return matmul(x, w).view({B, 1, S, E}).to(attn_dtype); };
  auto [out, lse] = mha::flash_attn(head(l.wq), head(l.wk), head(l.wv), true);
  return matmul(out.to(DType::Float32).view({B * S, E}), l.wo);
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 200;
  const bool gpu = cuda::is_available();
  const Device dev = gpu ? Device("cuda:0") : Device("cpu");
  const DType attn_dtype = gpu ? DType::BFloat16 : DType::Float32;
  const int64_t B = 4, S = 256, E = 64;
  manual_seed(7);
  const Layer teacher = make_layer(E, dev, false);
  Layer model = make_layer(E, dev, true);
  Tensor x = randn({B * S, E}).to(dev);
  Tensor target;
  {
    NoGradGuard no_grad;
    target = attention_layer(teacher, x, B, S, attn_dtype).detach();
  }
  const double lr = argc > 2 ? std::atof(argv[2]) : 5.0;
  double first = 0, last = 0;
  for (int step = 0; step < steps; ++step) {
    Tensor loss = mse_loss(attention_layer(model, x, B, S, attn_dtype), target);
    backward(loss);
    {
      NoGradGuard no_grad;
      for (const Tensor& p : model.params()) sub_(p, p.grad(), lr);
    }
    zero_grad(model.params());
    last = loss.cpu().item<double>();
    if (step == 0) first = last;
    if (step % 50 == 0 || step == steps - 1) std::printf("step %4d  loss %.6f\n", step, last);
  }
  std::printf(
      "flash_attn_train on %s (attention in %s, B=%lld S=%lld E=%lld): loss %.4g -> "
      "%.4g (%.1f%% of the start) in %d steps\n",
      dev.str().c_str(), attn_dtype == DType::BFloat16 ? "bfloat16" : "float32", (long long)B,
      (long long)S, (long long)E, first, last, 100 * last / first, steps);
  if (!(last < 0.5 * first)) {
    std::printf("FAIL: the loss did not halve\n");
    return 1;
  }
  return 0;
}
