// SPDX-License-Identifier: MIT
// `minitensor bench`: the group of benchmarks, its --json and --plot, and its subcommands
// (bench_<name>.cpp).
#include "tools/cli/cli.h"

namespace mt::cli {

BenchGroup::BenchGroup(CLI::App& app, Commands& commands)
    : commands_(commands),
      group_(app.add_subcommand(
          "bench",
          "benchmarks: dispatch, silu, matmul, mlp, graph, cpu, vmap, split, reduction (a table; "
          "--json, --plot)")) {
  group_->require_subcommand(1);
  group_->add_flag("--json", output_->json, "print JSON on stdout instead of the table");
  group_->add_option("--plot", output_->plot, "also draw the results into this SVG file");
}

void add_bench(CLI::App& app, Commands& commands) {
  BenchGroup bench(app, commands);
  add_bench_dispatch(bench);
  add_bench_silu_matmul(bench);
  add_bench_mlp(bench);
  add_bench_graph(bench);
  add_bench_cpu(bench);
  add_bench_vmap(bench);
  add_bench_split(bench);
  add_bench_reduction(bench);
}

}  // namespace mt::cli
