// SPDX-License-Identifier: MIT
// `minitensor bench graph`: a tiny kernel back to back, launched eagerly and replayed from
// one CUDA graph (runtime/cuda/cuda.h).
#pragma once

#include <cstddef>

#include "runtime/device.h"

namespace mt::bench {

struct GraphBenchResult {
  int kernels = 0;         // SiLU launches per timed loop
  int elements = 0;        // each on this many float32 elements
  double eager_us = 0;     // a kernel: mt::silu called `kernels` times, then a synchronize
  double graph_us = 0;     // a kernel: one replay of the graph of the same calls, synchronized
  size_t graph_nodes = 0;  // kernel nodes in the graph
  size_t pool_bytes = 0;   // the graph's private pool
};

// Medians over `repeats` timed loops of wall-clock time, after one untimed loop each.
GraphBenchResult bench_graph(const Device& device, int kernels, int elements, int repeats);

}  // namespace mt::bench
