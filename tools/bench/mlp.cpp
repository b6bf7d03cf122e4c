// SPDX-License-Identifier: MIT
#include "tools/bench/mlp.h"

#include <algorithm>

#include "tools/bench/timing.h"

namespace mt::bench {

MlpRow bench_mlp(const mlp::Shape& shape, Device device, const MlpOptions& opts) {
  check_device(device, "bench mlp");
  auto sync = [&] {
    if (device.is_cuda()) cuda::synchronize(device.index);
  };
  manual_seed(0);
  mlp::Task task = mlp::teacher_task(shape, device);
  mlp::Model model = mlp::init(shape, device);
  Tensor loss;
  // Warm-up: opts.warmup steps, or fewer once half of max_seconds is spent (slow CPU shapes).
  auto warm_begin = Clock::now();
  for (int i = 0;; ++i) {
    const double spent = std::chrono::duration<double>(Clock::now() - warm_begin).count();
    if (i >= std::max(1, opts.warmup) && spent >= opts.min_warmup_seconds) break;
    if (i >= 1 && spent > opts.max_seconds / 2) break;
    loss = mlp::train_step(model, task.x, task.target, opts.lr);
    sync();
  }
  std::vector<double> ms;
  Tensor first_loss;
  auto begin = Clock::now();
  while (int(ms.size()) < std::max(1, opts.min_steps) ||
         (int(ms.size()) < opts.steps &&
          std::chrono::duration<double>(Clock::now() - begin).count() < opts.max_seconds)) {
    auto t0 = Clock::now();
    loss = mlp::train_step(model, task.x, task.target, opts.lr);
    sync();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    if (!first_loss.defined()) first_loss = loss;
  }
  MlpRow r{shape, device.str(), int(ms.size()), median(ms),
           *std::min_element(ms.begin(), ms.end()), *std::max_element(ms.begin(), ms.end()),
           first_loss.item<double>(), loss.item<double>()};
  return r;
}

}  // namespace mt::bench
