// SPDX-License-Identifier: MIT
// Times pde::laplacian3d on cuda:0 (float32, one N^3 grid, N = 128, 256, 512): the op
// (the stream kernel, both boundaries), the stream kernel with x chunks of one plane, the
// tiled (2.5-D, shared-memory) kernel the op used before and the naive kernel, medians of
// CUDA events, with GB/s (one read and one write of the grid) and the share of a device
// copy of the same bytes.
//   build/examples/ops/laplacian3d/laplacian3d_bench [--json] [--sizes 128,256] [--sweep]
// --json prints one JSON object instead of the table (tools/bench/compare_torch.py --scenarios);
// --sweep adds the stream kernel with x chunks of 2 to 256 planes (the op picks its own).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench_timing.h"
#include "laplacian3d.h"

using namespace mt;
using ops_bench::median_ms;

namespace {

struct Row {
  int64_t n;
  std::string what;
  double ms, copy_ms;
};

}  // namespace

int main(int argc, char** argv) {
  bool json = false, sweep = false;
  std::vector<int64_t> sizes = {128, 256, 512};
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0) {
      json = true;
    } else if (std::strcmp(argv[i], "--sweep") == 0) {
      sweep = true;
    } else if (std::strcmp(argv[i], "--sizes") == 0 && i + 1 < argc) {
      sizes.clear();
      for (char* s = argv[++i]; *s;) {
        sizes.push_back(std::strtoll(s, &s, 10));
        if (*s == ',') ++s;
      }
    } else {
      std::fprintf(stderr, "usage: %s [--json] [--sizes 128,256,512] [--sweep]\n", argv[0]);
      return 2;
    }
  }
  if (!cuda::is_available()) {
    std::printf("laplacian3d bench: no GPU (%s); nothing timed\n",
                cuda::unavailable_reason().c_str());
    return 0;
  }
  const Device gpu("cuda:0");
  std::vector<Row> rows;
  for (int64_t n : sizes) {
    Tensor u = randn({n, n, n}).to(gpu);
    Tensor dst = empty_like(u);
    const int reps = n >= 512 ? 20 : 50;
    const double copy_ms = median_ms([&] { dst.copy_(u); }, reps);
    rows.push_back(
        {n, "op zero", median_ms([&] { pde::laplacian3d(u, 1.0, "zero"); }, reps), copy_ms});
    rows.push_back({n, "op periodic",
                    median_ms([&] { pde::laplacian3d(u, 1.0, "periodic"); }, reps), copy_ms});
    using K = pde::Laplacian3dKernel;
    rows.push_back({n, "stream x1 zero",
                    median_ms([&] { pde::laplacian3d_cuda(u, 1.0, false, K::Stream, 1); }, reps),
                    copy_ms});
    for (int chunk = 2; sweep && chunk <= 256 && chunk <= n; chunk *= 2)
      rows.push_back(
          {n, "stream x" + std::to_string(chunk) + " zero",
           median_ms([&] { pde::laplacian3d_cuda(u, 1.0, false, K::Stream, chunk); }, reps),
           copy_ms});
    rows.push_back({n, "tiled zero",
                    median_ms([&] { pde::laplacian3d_cuda(u, 1.0, false, K::Tiled); }, reps),
                    copy_ms});
    rows.push_back(
        {n, "naive zero",
         median_ms([&] { pde::laplacian3d_cuda(u, 1.0, false, pde::Laplacian3dKernel::Naive); },
                   reps),
         copy_ms});
  }
  const auto& props = cuda::device_props(0);
  if (json) {
    std::printf("{\"device\": \"%s\", \"rows\": [", props.name.c_str());
    for (size_t i = 0; i < rows.size(); ++i)
      std::printf("%s{\"n\": %lld, \"what\": \"%s\", \"ms\": %.6f, \"copy_ms\": %.6f}",
                  i ? ", " : "", (long long)rows[i].n, rows[i].what.c_str(), rows[i].ms,
                  rows[i].copy_ms);
    std::printf("]}\n");
    return 0;
  }
  std::printf("pde::laplacian3d on %s, float32, one N^3 grid, median ms of CUDA events\n",
              props.name.c_str());
  std::printf("| N | kernel | ms | GB/s | %% of copy | copy ms |\n|---|---|---|---|---|---|\n");
  for (const Row& r : rows) {
    const double bytes = 2.0 * double(r.n * r.n * r.n) * 4;
    std::printf("| %lld | %s | %.4f | %.0f | %.0f%% | %.4f |\n", (long long)r.n, r.what.c_str(),
                r.ms, bytes / (r.ms * 1e6), 100 * r.copy_ms / r.ms, r.copy_ms);
  }
  return 0;
}
