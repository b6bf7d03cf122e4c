// SPDX-License-Identifier: MIT
// `minitensor bench reduction`: a user's sum of squares through the reduction builder
// (mt::jit::reduction, one pass over x) beside mt::sum(x * x) eager (a product written out,
// then summed) and compiled (mt::compile of the same function), float32 at 2^20..2^26
// elements: medians, ratios and GB/s of x read, in one run; on cuda also the copy floor
// (a device copy of x, bytes read and written a second).
#include <cstdio>

#include "tools/bench/plot.h"
#include "tools/bench/timing.h"
#include "tools/cli/cli.h"

namespace mt::cli {
namespace {

struct ReductionCliOptions {
  std::string device = "cpu";
  int min_log2 = 20;
  int max_log2 = 26;
};

struct Row {
  int log2 = 0;
  double builder_ms = 0, eager_ms = 0, compiled_ms = 0, copy_ms = 0;
};

int bench_reduction_cmd(const ReductionCliOptions& v, const BenchOutput& o) {
  const Device dev = bench_device(v.device, "bench reduction");
  if (v.min_log2 > v.max_log2) {
    std::fprintf(stderr, "bench reduction: --min-log2 %d is above --max-log2 %d; give a range\n",
                 v.min_log2, v.max_log2);
    return 2;
  }
  const auto sumsq = jit::reduction({.name = "bench_sumsq", .map = "x * x"});
  const Compiled compiled = compile(
      [](const std::vector<Tensor>& in) { return std::vector<Tensor>{mt::sum(in[0] * in[0])}; },
      {.name = "sum_x_x"});
  auto time_ms = [&](const std::function<void()>& fn) {
    if (dev.is_cuda()) return bench::cuda_median_ms(dev.index, {}, fn);
    return bench::cpu_median_seconds(fn) * 1e3;
  };
  manual_seed(0);
  std::vector<Row> rows;
  for (int k = v.min_log2; k <= v.max_log2; ++k) {
    const Tensor x = randn({int64_t(1) << k}).to(dev);
    // the three agree before they are timed
    const double want = mt::sum(x.to(DType::Float64) * x.to(DType::Float64)).item<double>();
    for (const Tensor& got : {sumsq(x), mt::sum(x * x), compiled(x)[0]})
      MT_CHECK(std::abs(got.item<double>() - want) <= 1e-3 * want,
               "[bench reduction] a sum of squares of 2^{} elements is {}, float64 says {}", k,
               got.item<double>(), want);
    Row r{.log2 = k};
    r.builder_ms = time_ms([&] { (void)sumsq(x); });
    r.eager_ms = time_ms([&] { (void)mt::sum(x * x); });
    r.compiled_ms = time_ms([&] { (void)compiled(x); });
    if (dev.is_cuda()) {
      const Tensor y = empty_like(x);
      r.copy_ms = time_ms([&] { y.copy_(x); });
    }
    rows.push_back(r);
  }
  const std::string where =
      dev.is_cuda() ? fmt::format("{} ({})", dev.str(), cuda::device_props(dev.index).name)
                    : fmt::format("{} ({} threads)", cpu_model(), mt::num_threads());
  auto gbps = [](int k, double ms) { return double(int64_t(4) << k) / (ms * 1e6); };
  if (!o.plot.empty()) {
    bench::BarPlot plot{.title = fmt::format("sum of squares, float32, on {}", where),
                        .value_label = "GB/s of x read (median)"};
    for (const Row& r : rows) {
      plot.bars.push_back({fmt::format("2^{} builder", r.log2), gbps(r.log2, r.builder_ms)});
      plot.bars.push_back({fmt::format("2^{} sum(x * x)", r.log2), gbps(r.log2, r.eager_ms)});
      plot.bars.push_back({fmt::format("2^{} compiled", r.log2), gbps(r.log2, r.compiled_ms)});
    }
    write_plot(o.plot, bench::svg(plot));
  }
  if (o.json) {
    Json out = {
        {"bench", "reduction"}, {"device", dev.str()}, {"where", where}, {"rows", Json::array()}};
    for (const Row& r : rows) {
      Json j = {{"elements", int64_t(1) << r.log2},
                {"builder_ms", r.builder_ms},
                {"eager_ms", r.eager_ms},
                {"compiled_ms", r.compiled_ms},
                {"eager_over_builder", r.eager_ms / r.builder_ms},
                {"compiled_over_builder", r.compiled_ms / r.builder_ms},
                {"builder_gbps", gbps(r.log2, r.builder_ms)}};
      if (dev.is_cuda()) {
        j["copy_ms"] = r.copy_ms;
        j["copy_gbps"] = 2 * gbps(r.log2, r.copy_ms);
        j["builder_pct_of_copy"] = 100 * gbps(r.log2, r.builder_ms) / (2 * gbps(r.log2, r.copy_ms));
      }
      out["rows"].push_back(j);
    }
    print_json(out);
    return 0;
  }
  std::printf("sum of squares of float32 x on %s, medians%s\n", where.c_str(),
              dev.is_cuda() ? " (CUDA events, L2 flushed)" : "");
  std::printf(
      "  builder: jit::reduction({.map = \"x * x\"}); eager: mt::sum(x * x); compiled: "
      "mt::compile of the same\n");
  std::printf("%8s %12s %12s %12s %9s %9s %11s", "elements", "builder ms", "eager ms",
              "compiled ms", "eager/b", "comp/b", "builder GB/s");
  if (dev.is_cuda()) std::printf(" %11s %9s", "copy GB/s", "% of copy");
  std::printf("\n");
  for (const Row& r : rows) {
    std::printf("%8s %12.4f %12.4f %12.4f %8.2fx %8.2fx %11.1f",
                fmt::format("2^{}", r.log2).c_str(), r.builder_ms, r.eager_ms, r.compiled_ms,
                r.eager_ms / r.builder_ms, r.compiled_ms / r.builder_ms,
                gbps(r.log2, r.builder_ms));
    if (dev.is_cuda())
      std::printf(" %11.1f %8.1f%%", 2 * gbps(r.log2, r.copy_ms),
                  100 * gbps(r.log2, r.builder_ms) / (2 * gbps(r.log2, r.copy_ms)));
    std::printf("\n");
  }
  if (dev.is_cuda())
    std::printf(
        "  copy GB/s: a device copy of x, bytes read and written; %% of copy: the "
        "builder's bytes read a second against it\n");
  return 0;
}

}  // namespace

void add_bench_reduction(BenchGroup& bench) {
  auto [b, v] = bench.add<ReductionCliOptions>(
      "reduction",
      "a sum of squares through jit::reduction beside mt::sum(x * x), eager and compiled, "
      "float32 at 2^20..2^26 elements (GB/s; on cuda the copy floor)",
      bench_reduction_cmd);
  add_device_option(*b, v->device, "cpu or cuda (cuda:N)");
  b->add_option("--min-log2", v->min_log2, "the smallest size, 2^N elements")
      ->capture_default_str()
      ->check(CLI::Range(0, 30));
  b->add_option("--max-log2", v->max_log2, "the largest size, 2^N elements")
      ->capture_default_str()
      ->check(CLI::Range(0, 30));
}

}  // namespace mt::cli
