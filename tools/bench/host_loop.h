// SPDX-License-Identifier: MIT
// The timing loop of the host-cost benchmarks, shared by `minitensor bench dispatch` and
// tools/bench_libtorch.cpp so that both sides are measured the same way. Standard C++
// only: bench_libtorch builds against libtorch without the rest of minitensor.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

namespace mt::bench {

// Nanoseconds per call of f: 5 timed loops of `iters` calls, the median loop.
template <typename F>
double ns_per_call(F&& f, int64_t iters) {
  std::vector<double> runs;
  for (int r = 0; r < 5; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < iters; ++i) f();
    runs.push_back(std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() /
                   double(iters));
  }
  std::sort(runs.begin(), runs.end());
  return runs[2];
}

}  // namespace mt::bench
