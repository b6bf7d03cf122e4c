// SPDX-License-Identifier: MIT
// `minitensor bench cpu`: each CPU op on 1 thread and on several, side by side.
#include <algorithm>
#include <cstdio>

#include "kernels/cpu/cpu_kernels.h"
#include "tools/bench/cpu_threads.h"
#include "tools/bench/table.h"
#include "tools/cli/cli.h"

namespace mt::cli {
namespace {

// Each CPU op on one thread and on several, alternating, optionally beside a busy loop on
// every core (docs/cpu.md, "Threads").
int bench_cpu_cmd(const bench::CpuThreadsOptions& c, const BenchOutput& o) {
  std::vector<bench::CpuThreadsRow> rows;
  int busy = 0;
  {
    bench::Progress progress(
        "bench cpu", c.ops.empty() ? int(bench::cpu_threads_ops().size()) : int(c.ops.size()));
    rows = bench::cpu_threads_bench(c, progress, &busy);
  }
  const std::string where = fmt::format("{}, {} usable CPUs", cpu_model(), bench::usable_cpus());
  double worst = 0;
  for (const auto& r : rows) worst = std::max(worst, r.multi_ms / r.single_ms);
  if (o.json) {
    Json json_rows = Json::array();
    for (const auto& r : rows)
      json_rows.push_back({{"op", r.op},
                           {"shape", r.shape},
                           {"threads", r.threads},
                           {"samples", r.samples},
                           {"single_ms", r.single_ms},
                           {"multi_ms", r.multi_ms},
                           {"ratio", r.multi_ms / r.single_ms}});
    print_json({{"bench", "cpu"},
                {"where", where},
                {"contended", c.contended},
                {"busy_loops", busy},
                {"worst_ratio", worst},
                {"rows", json_rows}});
    return 0;
  }
  std::printf("CPU ops on 1 thread and on %d, single calls alternating, median ms, on %s%s\n",
              rows.empty() ? cpu::num_threads() : rows[0].threads, where.c_str(),
              c.contended
                  ? fmt::format("; a busy loop on each of the {} CPUs beside it", busy).c_str()
                  : "");
  std::vector<std::vector<std::string>> table;
  for (const auto& r : rows)
    table.push_back({r.op, r.shape, fmt::format("{}", r.samples),
                     fmt::format("{:.4f}", r.single_ms), fmt::format("{:.4f}", r.multi_ms),
                     fmt::format("{:.2f}", r.multi_ms / r.single_ms)});
  bench::print_table({"op", "shape", "calls", "1 thread ms",
                      fmt::format("{} threads ms", rows.empty() ? 0 : rows[0].threads), "ratio"},
                     table);
  std::printf("ratio = multi-thread time / single-thread time (< 1: the threads help)%s\n",
              c.contended ? fmt::format("; worst {:.2f} (goal: at most 1.5)", worst).c_str() : "");
  return 0;
}

}  // namespace

void add_bench_cpu(BenchGroup& bench) {
  auto [b_cpu, c] = bench.add<bench::CpuThreadsOptions>(
      "cpu",
      "each CPU op on 1 thread and on several, side by side (--contended: beside a busy loop on "
      "every core)",
      bench_cpu_cmd);
  b_cpu->add_flag(
      "--contended", c->contended,
      "run a busy loop on every usable core while timing (stopped at the end, bounded in time)");
  b_cpu->add_option("--threads", c->threads, "the multi-thread count (default: the kernels' count)")
      ->check(CLI::Range(1, 1024));
  b_cpu->add_option("--min-time", c->min_time, "seconds of alternating calls per op, at least")
      ->capture_default_str()
      ->check(CLI::Range(1e-3, 3600.0));
  b_cpu->add_option("--op", c->ops, "time only this op (repeatable)")
      ->check(CLI::IsMember(bench::cpu_threads_ops()));
}

}  // namespace mt::cli
