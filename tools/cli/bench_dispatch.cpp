// SPDX-License-Identifier: MIT
// `minitensor bench dispatch`: ns per call through the dispatcher, against a direct call;
// --self-check: what the timing can resolve on this machine.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "tools/bench/dispatch.h"
#include "tools/bench/host_loop.h"
#include "tools/bench/plot.h"
#include "tools/cli/cli.h"

namespace mt::cli {
namespace {

struct DispatchCliOptions {
  int64_t iters = 2000000;
  std::string only;
  int self_check = 0;
};

// --self-check ROUNDS: each row timed against itself in two forms: the pairs of
// `bench_libtorch --interleaved` (kPairs pairs of short loops, the median of the pairs' ratios)
// and 5 loops a side, alternating loop by loop, their medians compared (each side timed as
// `bench dispatch` times a row, without the separate-process comparison's process boundary).
// Both sides run the same code, so every ratio should be 1: the spread is what the form
// cannot resolve on this machine in its present state.
// --only keeps one row, --json prints the ranges as JSON (keyed by the rows' keys).
int bench_dispatch_self_check(const bench::DispatchRows& dispatch_rows, int64_t iters, int rounds,
                              const std::string& only, bool json) {
  const std::string pairs = fmt::format("{} pairs of ~{} ms", bench::kPairs, bench::kPairLoopMs);
  if (!json) {
    std::printf("each row against itself, %d rounds, on %s: the range of the ratios\n", rounds,
                cpu_model().c_str());
    std::printf("  %-58s %20s   %-20s\n", "", "5 loops a side", pairs.c_str());
  }
  Json rows = Json::object();
  for (const bench::DispatchRow& r : dispatch_rows.rows()) {
    if (!only.empty() && only != r.key) continue;
    double lo[2] = {INFINITY, INFINITY}, hi[2] = {0, 0};
    for (int k = 0; k < rounds; ++k) {
      std::vector<double> a, b;
      for (int l = 0; l < 5; ++l) {
        a.push_back(bench::loop_ns(r.call, iters / r.divisor));
        b.push_back(bench::loop_ns(r.call, iters / r.divisor));
      }
      double ratio[2] = {
          bench::median(b) / bench::median(a),
          bench::ns_per_call_paired(r.call, r.call, bench::kPairs, bench::kPairLoopMs, k % 2 == 0)
              .ratio};
      for (int f = 0; f < 2; ++f)
        lo[f] = std::min(lo[f], ratio[f]), hi[f] = std::max(hi[f], ratio[f]);
    }
    if (json)
      rows[r.key] = {
          {"loops_min", lo[0]}, {"loops_max", hi[0]}, {"pairs_min", lo[1]}, {"pairs_max", hi[1]}};
    else
      std::printf("  %-58s %8.3f to %-8.3f %8.3f to %-8.3f\n", r.label, lo[0], hi[0], lo[1], hi[1]);
  }
  if (json)
    print_json({{"bench", "dispatch --self-check"},
                {"cpu", cpu_model()},
                {"rounds", rounds},
                {"loops_a_side", 5},
                {"pairs", bench::kPairs},
                {"pair_loop_ms", bench::kPairLoopMs},
                {"rows", rows}});
  return 0;
}

int bench_dispatch(const BenchOutput& o, int64_t iters, const std::string& only, int self_check) {
  bench::DispatchRows dispatch_rows;  // tools/bench/dispatch.cpp, shared with bench_libtorch
  if (self_check > 0)
    return bench_dispatch_self_check(dispatch_rows, iters, self_check, only, o.json);
  // A no-op row's loop makes `iters` calls, silu's and add's iters / 20. --only ROW times
  // that row alone (the others print nan), so that an instruction count of the whole
  // process under callgrind is that row's.
  struct Row {
    const char* key;
    const char* name;
    double ns;
  };
  std::vector<Row> rows;
  for (const bench::DispatchRow& r : dispatch_rows.rows()) {
    bool wanted = only.empty() || only == r.key;
    rows.push_back(
        {r.key, r.label, wanted ? bench::ns_per_call(r.call, iters / r.divisor) : std::nan("")});
  }
  double t_direct = rows[0].ns;
  if (!o.plot.empty()) {
    bench::BarPlot plot{
        .title = fmt::format("dispatch cost, ns per call (median of 5 runs), {}", cpu_model()),
        .value_label = "ns per call"};
    for (const Row& r : rows) plot.bars.push_back({r.name, r.ns});
    write_plot(o.plot, bench::svg(plot));
  }
  if (o.json) {
    Json j = Json::object();
    for (const Row& r : rows) j[r.key] = std::round(r.ns * 100) / 100;  // bench_libtorch's keys
    print_json(j);
    return 0;
  }
  std::printf("dispatch cost, ns per call (median of 5 runs), on %s\n", cpu_model().c_str());
  for (const Row& r : rows)
    std::printf("  %-58s %8.1f ns   (%+.1f ns vs direct)\n", r.name, r.ns, r.ns - t_direct);
  return 0;
}

int bench_dispatch_cmd(const DispatchCliOptions& d, const BenchOutput& o) {
  if (d.self_check > 0 && !o.plot.empty()) {
    std::fprintf(stderr,
                 "minitensor bench dispatch: --self-check prints ranges of ratios and draws no "
                 "plot; leave out --plot (or --self-check)\n");
    return 2;
  }
  return bench_dispatch(o, d.iters, d.only, d.self_check);
}

}  // namespace

void add_bench_dispatch(BenchGroup& bench) {
  auto [b_dispatch, o] = bench.add<DispatchCliOptions>(
      "dispatch", "ns per call through the dispatcher, against a direct call", bench_dispatch_cmd);
  b_dispatch
      ->add_option("--iters", o->iters,
                   "calls in each timed loop of the no-op rows (silu and add: a 20th); fewer for "
                   "valgrind --tool=callgrind (docs/host-cost.md)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t(20), int64_t(1) << 40));
  b_dispatch
      ->add_option("--self-check", o->self_check,
                   "time each row against itself for this many rounds, as 5 loops a side "
                   "and as the pairs of bench_libtorch --interleaved, and print the ratios' "
                   "ranges: what each form can resolve on this machine")
      ->check(CLI::Range(1, 1000));
  b_dispatch
      ->add_option("--only", o->only,
                   "time one row only (for callgrind's counts): direct, dispatch (or cpu), "
                   "autograd_redispatch (or autograd), boxed, silu_grad (or silu), add")
      // The rows' keys (tools/bench/dispatch.cpp), and the short names they had before.
      ->transform(CLI::CheckedTransformer(std::map<std::string, std::string>{
                                              {"direct", "direct"},
                                              {"cpu", "dispatch"},
                                              {"dispatch", "dispatch"},
                                              {"autograd", "autograd_redispatch"},
                                              {"autograd_redispatch", "autograd_redispatch"},
                                              {"boxed", "boxed"},
                                              {"silu", "silu_grad"},
                                              {"silu_grad", "silu_grad"},
                                              {"add", "add"}})
                      .description(""))
      ->type_name("ROW");
}

}  // namespace mt::cli
