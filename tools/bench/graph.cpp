// SPDX-License-Identifier: MIT
#include "tools/bench/graph.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "minitensor.h"
#include "runtime/cuda/cuda.h"
#include "tools/bench/timing.h"

namespace mt::bench {

GraphBenchResult bench_graph(const Device& device, int kernels, int elements, int repeats) {
  check_device(device, "bench graph");
  MT_CHECK(device.is_cuda(), "[bench graph] needs a CUDA device (--device cuda), got {}", device);
  const int index = device.index;
  Tensor x = randn({elements}).to(device);
  auto median_us_per_kernel = [&](auto&& loop) {
    loop();
    cuda::synchronize(index);
    std::vector<double> us;
    for (int r = 0; r < repeats; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      loop();
      cuda::synchronize(index);
      us.push_back(
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
          kernels);
    }
    std::sort(us.begin(), us.end());
    return us[us.size() / 2];
  };
  GraphBenchResult res{.kernels = kernels, .elements = elements};
  // Each output is dropped at once, so every call after the first reuses one cached block.
  res.eager_us = median_us_per_kernel([&] {
    for (int i = 0; i < kernels; ++i) Tensor y = silu(x);
  });
  cuda::Graph g;
  g.capture_begin(index);
  for (int i = 0; i < kernels; ++i) Tensor y = silu(x);  // one pool block, reused
  g.capture_end();
  res.graph_nodes = g.num_nodes();
  res.pool_bytes = g.pool_bytes();
  res.graph_us = median_us_per_kernel([&] { g.replay(); });
  return res;
}

}  // namespace mt::bench
