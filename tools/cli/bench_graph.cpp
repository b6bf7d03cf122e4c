// SPDX-License-Identifier: MIT
// `minitensor bench graph`: a tiny kernel back to back, eager launches against one CUDA
// graph replay.
#include <cstdio>

#include "tools/bench/graph.h"
#include "tools/bench/plot.h"
#include "tools/bench/table.h"
#include "tools/cli/cli.h"

namespace mt::cli {
namespace {

struct GraphCliOptions {
  std::string device = "cuda";
  int kernels = 1000, elements = 4096, repeats = 21;
};

int bench_graph_cmd(const GraphCliOptions& g, const BenchOutput& o) {
  Device dev = bench_device(g.device, "bench graph");
  const bench::GraphBenchResult r = bench::bench_graph(dev, g.kernels, g.elements, g.repeats);
  const std::string where = fmt::format("{} ({})", dev.str(), cuda::device_props(dev.index).name);
  const double ratio = r.eager_us / r.graph_us;
  if (!o.plot.empty()) {
    bench::BarPlot plot{.title = fmt::format("silu on {} float32, {} back to back, on {}",
                                             r.elements, r.kernels, where),
                        .value_label = "us a kernel (median)"};
    plot.bars.push_back({"eager: mt::silu called N times", r.eager_us});
    plot.bars.push_back({"one CUDA graph of the same N kernels", r.graph_us});
    write_plot(o.plot, bench::svg(plot));
  }
  if (o.json) {
    print_json({{"bench", "graph"},
                {"device", dev.str()},
                {"where", where},
                {"kernels", r.kernels},
                {"elements", r.elements},
                {"eager_us", r.eager_us},
                {"graph_us", r.graph_us},
                {"eager_over_graph", ratio},
                {"graph_nodes", r.graph_nodes},
                {"pool_bytes", r.pool_bytes}});
    return 0;
  }
  std::printf(
      "a tiny kernel (silu on %d float32) %d times back to back on %s: wall clock a kernel, median "
      "of %d\n"
      "loops, each ending in a synchronize\n",
      r.elements, r.kernels, where.c_str(), g.repeats);
  bench::print_table(
      {"path", "us a kernel"},
      {{"eager: mt::silu called N times", fmt::format("{:.3f}", r.eager_us)},
       {fmt::format("one CUDA graph of the same N kernels ({} nodes, pool {} B), replayed",
                    r.graph_nodes, r.pool_bytes),
        fmt::format("{:.3f}", r.graph_us)}});
  std::printf("eager / graph: %.2fx\n", ratio);
  return 0;
}

}  // namespace

void add_bench_graph(BenchGroup& bench) {
  auto [b_graph, g] = bench.add<GraphCliOptions>(
      "graph", "a tiny kernel back to back: eager launches against one CUDA graph replay",
      bench_graph_cmd);
  add_device_option(*b_graph, g->device, "cuda (cuda:N)");
  b_graph->add_option("--kernels", g->kernels, "launches per timed loop")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  b_graph->add_option("--elements", g->elements, "float32 elements per kernel")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 28));
  add_repeats_option(*b_graph, g->repeats, "timed loops (median)");
}

}  // namespace mt::cli
