// SPDX-License-Identifier: MIT
// The timing loops of the host-cost benchmarks, shared by `minitensor bench dispatch` and
// tools/bench_libtorch.cpp so that both sides are measured the same way. Standard C++
// only: bench_libtorch builds against libtorch without minitensor's headers.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

namespace mt::bench {

// Nanoseconds per call of f over one loop of `iters` calls.
template <typename F>
double loop_ns(F&& f, int64_t iters) {
  auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < iters; ++i) f();
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() /
         double(iters);
}

inline double median5(std::vector<double> runs) {
  std::sort(runs.begin(), runs.end());
  return runs[runs.size() / 2];
}

// Nanoseconds per call of f: 5 timed loops of `iters` calls, the median loop.
template <typename F>
double ns_per_call(F&& f, int64_t iters) {
  std::vector<double> runs;
  for (int r = 0; r < 5; ++r) runs.push_back(loop_ns(f, iters));
  return median5(std::move(runs));
}

// Two calls timed side by side: 5 pairs of loops, f's loop and g's back to back, the order
// alternating from pair to pair (f first in pairs 0, 2, 4 when f_first, else g first), so
// that a change in the host's state (another process, the clock, a migration) between
// loops falls on both sides alike. The median loop of each side, ns per call.
struct PairNs {
  double f, g;
};
template <typename F, typename G>
PairNs ns_per_call_interleaved(F&& f, int64_t f_iters, G&& g, int64_t g_iters, bool f_first) {
  std::vector<double> fr, gr;
  for (int r = 0; r < 5; ++r) {
    if ((r % 2 == 0) == f_first) {
      fr.push_back(loop_ns(f, f_iters));
      gr.push_back(loop_ns(g, g_iters));
    } else {
      gr.push_back(loop_ns(g, g_iters));
      fr.push_back(loop_ns(f, f_iters));
    }
  }
  return {median5(std::move(fr)), median5(std::move(gr))};
}

}  // namespace mt::bench
