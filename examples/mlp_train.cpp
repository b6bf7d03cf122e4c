// SPDX-License-Identifier: MIT
// A two-layer MLP with SiLU, trained end to end with the tape: y = silu(x W1 + b1) W2 + b2
// on a synthetic regression task, MSE loss, SGD under no_grad (the model is examples/mlp.h).
//   build/examples/mlp_train [--steps N] [--batch B] [--in I] [--hidden H] [--out O]
//                            [--lr LR] [--seed S] [--device cpu|cuda] [--every K]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "examples/mlp.h"
#include "minitensor.h"

using namespace mt;

int main(int argc, char** argv) {
  int64_t steps = 200, every = 20;
  mlp::Shape shape{.batch = 64, .in = 32, .hidden = 64, .out = 1};
  double lr = 0.05;
  uint64_t seed = 0;
  std::string device = "cpu";
  for (int i = 1; i < argc; i += 2) {
    std::string k = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "mlp_train: option %s needs a value\n", k.c_str());
      return 2;
    }
    std::string v = argv[i + 1];
    if (k == "--steps")
      steps = std::atoll(v.c_str());
    else if (k == "--batch")
      shape.batch = std::atoll(v.c_str());
    else if (k == "--in")
      shape.in = std::atoll(v.c_str());
    else if (k == "--hidden")
      shape.hidden = std::atoll(v.c_str());
    else if (k == "--out")
      shape.out = std::atoll(v.c_str());
    else if (k == "--lr")
      lr = std::atof(v.c_str());
    else if (k == "--seed")
      seed = std::strtoull(v.c_str(), nullptr, 10);
    else if (k == "--device")
      device = v;
    else if (k == "--every")
      every = std::max<int64_t>(1, std::atoll(v.c_str()));
    else {
      std::fprintf(stderr, "mlp_train: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  try {
    Device dev(device);
    if (dev.is_cuda() && !cuda::is_available()) {
      std::fprintf(stderr, "mlp_train: --device %s: CUDA is unavailable (%s)\n", dev.str().c_str(),
                   cuda::unavailable_reason().c_str());
      return 1;
    }
    manual_seed(seed);
    // The task first, then the parameters: the same draws from the seed on every device.
    mlp::Task task = mlp::teacher_task(shape, dev);
    mlp::Model model = mlp::init(shape, dev);

    double first = 0, last = 0;
    for (int64_t step = 0; step < steps; ++step) {
      last = mlp::train_step(model, task.x, task.target, lr).item<double>();
      if (step == 0) first = last;
      if (step % every == 0 || step == steps - 1)
        std::printf("step %4lld  loss %.6f\n", (long long)step, last);
    }
    bool ok = last < 0.1 * first;
    std::printf("first loss %.6f, final loss %.6f (%.1f%% of the first) on %s: %s\n", first, last,
                100.0 * last / first, dev.str().c_str(),
                ok ? "trained" : "did NOT reach 10% of the first loss");
    return ok ? 0 : 1;
  } catch (const Error& e) {
    std::fprintf(stderr, "mlp_train: %s\n", e.what());
    return 1;
  }
}
