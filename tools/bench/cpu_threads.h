// SPDX-License-Identifier: MIT
// `minitensor bench cpu`: each CPU op on one thread and on several, side by side in one
// run (single calls alternating between the two counts; medians), optionally with a busy
// loop on every core beside it (--contended): what an app, a CI runner or a server sees.
#pragma once

#include <string>
#include <vector>

#include "tools/bench/progress.h"

namespace mt::bench {

struct CpuThreadsOptions {
  int threads = 0;               // the multi-thread count; 0: the kernels' default
  bool contended = false;        // a busy loop on every core while timing
  double min_time = 0.5;         // seconds per op (both thread counts), at least
  std::vector<std::string> ops;  // empty: all
};

struct CpuThreadsRow {
  std::string op, shape;
  int threads;                 // the multi-thread count
  int samples;                 // calls timed per thread count
  double single_ms, multi_ms;  // medians
};

// The ops timed, in order ("silu", "silu_backward", "add", ...).
std::vector<std::string> cpu_threads_ops();

// The rows, and in *busy_loops how many busy loops ran (0 unless contended).
std::vector<CpuThreadsRow> cpu_threads_bench(const CpuThreadsOptions& opts, Progress& progress,
                                             int* busy_loops);

// The CPUs this process may run on (taskset, cpusets).
int usable_cpus();

}  // namespace mt::bench
