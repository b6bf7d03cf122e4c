// SPDX-License-Identifier: MIT
// The timing loops of the host-cost benchmarks, shared by `minitensor bench dispatch` and
// tools/bench/bench_libtorch.cpp so that both sides are measured the same way. Standard C++
// only: bench_libtorch builds against libtorch without minitensor's headers.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

namespace mt::bench {

// Each timing function takes the clock as a template argument, std::chrono::steady_clock
// by default: tests/test_bench_loops.cpp passes a clock that the timed calls advance, so
// its checks do not depend on the machine's load.

// Nanoseconds per call of f over one loop of `iters` calls.
template <typename Clock = std::chrono::steady_clock, typename F>
double loop_ns(F&& f, int64_t iters) {
  auto t0 = Clock::now();
  for (int64_t i = 0; i < iters; ++i) f();
  return std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / double(iters);
}

// The median of v (the upper one of the two middle values for an even count; 0 if empty).
inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

// Nanoseconds per call of f: 5 timed loops of `iters` calls, the median loop.
template <typename Clock = std::chrono::steady_clock, typename F>
double ns_per_call(F&& f, int64_t iters) {
  std::vector<double> runs;
  for (int r = 0; r < 5; ++r) runs.push_back(loop_ns<Clock>(f, iters));
  return median(std::move(runs));
}

// How many calls of f make a loop of about target_ns (from a loop of at least 1 ms).
template <typename Clock = std::chrono::steady_clock, typename F>
int64_t calls_for(F&& f, double target_ns) {
  int64_t n = 16;
  double per_call = loop_ns<Clock>(f, n);
  while (per_call * double(n) < 1e6 && n < (int64_t(1) << 32)) {
    n *= 4;
    per_call = loop_ns<Clock>(f, n);
  }
  return std::max<int64_t>(1, int64_t(target_ns / per_call));
}

// Two calls timed side by side, as pairs of loops: f's loop and g's back to back, each about
// loop_ms long, the order alternating from pair to pair (f first in the even pairs when
// f_first). A pair's two loops run within a millisecond of each other, so a change in the
// host's state (another process, the clock, a migration) slower than that scales both and
// leaves the pair's ratio g / f as it was; the median over the pairs then drops the pairs a
// change fell inside. Returns the median loop of each side (ns per call) and the median of
// the pairs' ratios.
//
// Short loops and many pairs (kPairs of kPairLoopMs, what bench_libtorch --interleaved and
// `minitensor bench dispatch --self-check` use): on a 2-core VM with two busy loops beside
// it, a row against itself (--self-check) came out 0.994 to 1.014 with 101 pairs of 0.5 ms
// over 10 rounds, and 0.345 to 2.882 with 21 pairs of 5 ms, whose loops are as long as the
// scheduler's time slices and so are preempted in step with the pairs' alternation.
inline constexpr int kPairs = 101;
inline constexpr double kPairLoopMs = 0.5;

struct PairedNs {
  double f, g, ratio;
};
template <typename Clock = std::chrono::steady_clock, typename F, typename G>
PairedNs ns_per_call_paired(F&& f, G&& g, int pairs, double loop_ms, bool f_first) {
  const int64_t nf = calls_for<Clock>(f, loop_ms * 1e6), ng = calls_for<Clock>(g, loop_ms * 1e6);
  std::vector<double> fr, gr, ratios;
  for (int p = 0; p < pairs; ++p) {
    double a, b;
    if ((p % 2 == 0) == f_first) {
      a = loop_ns<Clock>(f, nf);
      b = loop_ns<Clock>(g, ng);
    } else {
      b = loop_ns<Clock>(g, ng);
      a = loop_ns<Clock>(f, nf);
    }
    fr.push_back(a);
    gr.push_back(b);
    ratios.push_back(b / a);
  }
  return {median(std::move(fr)), median(std::move(gr)), median(std::move(ratios))};
}

}  // namespace mt::bench
