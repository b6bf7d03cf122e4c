// SPDX-License-Identifier: MIT
// ms per training step of examples/mlp.h's two-layer MLP (forward, mse_loss, backward,
// SGD, zero grads): median over steps after warm-up, the device synchronized before
// each clock read. Used by `minitensor bench mlp`.
#pragma once

#include <string>
#include <vector>

#include "examples/mlp.h"
#include "tools/bench/progress.h"

namespace mt::bench {

struct MlpOptions {
  int warmup = 5;            // steps, fewer where they take over max_seconds / 2
  // ... and at least this long: after set-up (the task is drawn with CPU matmuls),
  // OpenBLAS's threads busy-wait for a while, on every core; measured on the GPU host
  // (16 vCPUs), 64/32/64 steps timed in that window took 0.220 ms, 0.138 ms after 0.5 s.
  double min_warmup_seconds = 0.5;
  int steps = 50;            // timed steps, at most
  int min_steps = 3;         // timed steps, at least (even past max_seconds)
  double max_seconds = 10;   // stop timing a shape after this much (slow CPU shapes)
  double lr = 1e-3;
};

struct MlpRow {
  mlp::Shape shape;
  std::string device;
  int steps;                     // timed
  double ms_median, ms_min, ms_max;
  double loss_first, loss_last;  // of the timed steps, to show the step does train
};

MlpRow bench_mlp(const mlp::Shape& shape, Device device, const MlpOptions& opts);

}  // namespace mt::bench
