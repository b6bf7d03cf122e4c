// SPDX-License-Identifier: MIT
// Timing for the benchmarks: CPU medians with steady_clock, CUDA medians with events
// (warm-up, repeats, an optional L2 flush before each repeat), like triton's do_bench.
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "minitensor.h"
#include "tools/bench/host_loop.h"  // median

namespace mt::bench {

using Clock = std::chrono::steady_clock;

// Median seconds of f: one warm-up call, then at least min_reps calls, more until
// min_seconds have passed (at most max_reps).
template <typename F>
double cpu_median_seconds(F&& f, int min_reps = 5, double min_seconds = 0.25, int max_reps = 1000) {
  f();  // warm-up: faults in the pages, wakes the threads
  std::vector<double> times;
  auto begin = Clock::now();
  while (int(times.size()) < min_reps ||
         (std::chrono::duration<double>(Clock::now() - begin).count() < min_seconds &&
          int(times.size()) < max_reps)) {
    auto t0 = Clock::now();
    f();
    times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return median(std::move(times));
}

// memcpy of nbytes on the CPU, cut into one piece per kernel thread like the kernels' loops.
void parallel_copy(char* dst, const char* src, int64_t nbytes);

// "AMD EPYC 7B13" from /proc/cpuinfo, or "unknown CPU".
std::string cpu_model();

struct CudaTiming {
  int warmup = 5;
  int repeats = 50;
  bool flush_l2 = true;  // write a 256 MiB buffer before each repeat
};

// Median milliseconds of fn on the current stream of cuda:device, timed with events.
// Throws mt::Error where CUDA is unavailable.
double cuda_median_ms(int device, const CudaTiming& timing, const std::function<void()>& fn);

// Throws a clear mt::Error naming `what` when `device` is CUDA and CUDA is unavailable,
// or when it is neither CPU nor CUDA.
void check_device(const Device& device, std::string_view what);

}  // namespace mt::bench
