// SPDX-License-Identifier: MIT
// Timing for the examples/ops benches: the median of CUDA-event times on cuda:0.
#pragma once

#include <algorithm>
#include <vector>

#include "minitensor.h"

namespace ops_bench {

// Median milliseconds of fn over `reps` runs after 3 warm-ups, one event pair a run.
template <typename F>
double median_ms(F&& fn, int reps) {
  mt::cuda::EventTimer t(0);
  std::vector<double> ms;
  for (int i = 0; i < reps + 3; ++i) {
    t.start();
    fn();
    t.stop();
    if (i >= 3) ms.push_back(t.elapsed_ms());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace ops_bench
