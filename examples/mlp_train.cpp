// A two-layer MLP with SiLU, trained end to end with the tape: y = silu(x W1 + b1) W2 + b2
// on a synthetic regression task, MSE loss, SGD under no_grad.
//   build/examples/mlp_train [--steps N] [--batch B] [--in I] [--hidden H] [--lr LR]
//                            [--seed S] [--device cpu|cuda] [--every K]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "minitensor.h"

using namespace mt;

int main(int argc, char** argv) {
  int64_t steps = 200, batch = 64, in = 32, hidden = 64, every = 20;
  double lr = 0.05;
  uint64_t seed = 0;
  std::string device = "cpu";
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--steps") steps = std::atoll(v.c_str());
    else if (k == "--batch") batch = std::atoll(v.c_str());
    else if (k == "--in") in = std::atoll(v.c_str());
    else if (k == "--hidden") hidden = std::atoll(v.c_str());
    else if (k == "--lr") lr = std::atof(v.c_str());
    else if (k == "--seed") seed = std::strtoull(v.c_str(), nullptr, 10);
    else if (k == "--device") device = v;
    else if (k == "--every") every = std::atoll(v.c_str());
    else {
      std::fprintf(stderr, "mlp_train: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  try {
    Device dev(device);
    manual_seed(seed);
    // The task: a fixed random teacher network's outputs plus a little noise.
    Tensor x = randn({batch, in}).to(dev);
    Tensor teacher = randn({in, 1}).to(dev);
    Tensor target = add(matmul(silu(x), teacher), mul(randn({batch, 1}).to(dev), 0.01));

    double scale1 = 1.0 / std::sqrt(double(in)), scale2 = 1.0 / std::sqrt(double(hidden));
    Tensor w1 = mul(randn({in, hidden}), scale1).to(dev).requires_grad_();
    Tensor b1 = zeros({hidden}).to(dev).requires_grad_();
    Tensor w2 = mul(randn({hidden, 1}), scale2).to(dev).requires_grad_();
    Tensor b2 = zeros({1}).to(dev).requires_grad_();
    std::vector<Tensor> params{w1, b1, w2, b2};

    double first = 0, last = 0;
    for (int64_t step = 0; step < steps; ++step) {
      Tensor h = silu(add(matmul(x, w1), b1));
      Tensor y = add(matmul(h, w2), b2);
      Tensor loss = mse_loss(y, target);
      backward(loss);
      {
        NoGradGuard no_grad;
        for (Tensor& p : params) sub_(p, p.grad(), lr);
      }
      zero_grad(params);
      last = loss.item<double>();
      if (step == 0) first = last;
      if (step % every == 0 || step == steps - 1)
        std::printf("step %4lld  loss %.6f\n", (long long)step, last);
    }
    bool ok = last < 0.1 * first;
    std::printf("first loss %.6f, final loss %.6f (%.1f%% of the first): %s\n", first, last,
                100.0 * last / first, ok ? "trained" : "did NOT reach 10% of the first loss");
    return ok ? 0 : 1;
  } catch (const Error& e) {
    std::fprintf(stderr, "mlp_train: %s\n", e.what());
    return 1;
  }
}
