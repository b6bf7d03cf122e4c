// SPDX-License-Identifier: MIT
// `minitensor bench silu` and `bench matmul`: sweeps over sizes (and CPU thread counts),
// against a copy of the same bytes; one file, as they share their options.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>

#include "kernels/cpu/cpu_kernels.h"
#include "tools/bench/matmul.h"
#include "tools/bench/plot.h"
#include "tools/bench/silu.h"
#include "tools/bench/table.h"
#include "tools/cli/cli.h"

namespace mt::cli {
namespace {

struct SweepOptions {
  std::string device = "cpu";
  int min_log2 = -1, max_log2 = -1;  // -1: the benchmark's default for the device
  std::vector<int> threads;          // CPU; empty: the kernels' default thread count
  double min_time = 0.25;            // CPU: seconds of repeats per figure, at least
  int repeats = 50, warmup = 5;      // CUDA
  std::string dtype = "float32";     // CUDA SiLU
};

// --threads past the machine's hardware threads are clamped, with a warning, before the
// bench starts.
SweepOptions clamp_thread_counts(SweepOptions s) {
  for (int& t : s.threads) t = clamp_threads(t, "--threads");
  return s;
}

std::vector<int> thread_counts(const SweepOptions& s) {
  return s.threads.empty() ? std::vector<int>{cpu::num_threads()} : s.threads;
}

int bench_silu(const SweepOptions& s, const BenchOutput& o) {
  Device dev = bench_device(s.device, "bench silu");
  const int lo = s.min_log2 >= 0 ? s.min_log2 : 12;
  const int hi = s.max_log2 >= 0 ? s.max_log2 : dev.is_cuda() ? 28 : 24;
  MT_CHECK(lo <= hi && hi <= 32, "[bench silu] need --min-log2 <= --max-log2 <= 32, got {} and {}",
           lo, hi);
  const int sizes = (hi - lo) / 2 + 1;
  bench::LinePlot plot{
      .title = "", .x_label = "elements (float32)", .y_label = "time per call (us)"};
  std::vector<std::vector<std::string>> table;
  Json json_rows = Json::array();
  if (dev.is_cpu()) {
    const auto threads = thread_counts(s);
    std::vector<bench::SiluCpuRow> rows;
    {
      bench::Progress progress("bench silu", sizes * int(threads.size()));
      rows = bench::silu_cpu_sweep(lo, hi, threads, progress, s.min_time);
    }
    plot.title = fmt::format("SiLU float32 on the CPU ({}), median time per call", cpu_model());
    int color = 0;
    for (int t : threads)
      for (const char* op : {"silu_fwd", "silu_bwd"}) {
        bench::Series v{.name = fmt::format("{} {}T", op, t), .color = color};
        bench::Series c{
            .name = fmt::format("copy floor {} {}T", op, t), .reference = true, .color = color++};
        for (const auto& r : rows)
          if (r.op == op && r.threads == t) {
            v.x.push_back(double(r.n)), v.y.push_back(r.seconds * 1e6);
            c.x.push_back(double(r.n)), c.y.push_back(r.copy_seconds * 1e6);
          }
        plot.series.push_back(std::move(v));
        plot.series.push_back(std::move(c));
      }
    for (size_t i = 0; i < rows.size(); ++i) {
      const auto& r = rows[i];
      table.push_back(
          {r.op, fmt::format("{}", r.threads), fmt::format("2^{}", std::countr_zero(uint64_t(r.n))),
           fmt::format("{:.2f}", r.seconds * 1e6), fmt::format("{:.2f}", r.gbps),
           fmt::format("{:.2f}", r.copy_seconds * 1e6), fmt::format("{:.2f}", r.copy_gbps),
           fmt::format("{:.0f}%", 100 * r.gbps / r.copy_gbps)});
      json_rows.push_back({{"op", r.op},
                           {"threads", r.threads},
                           {"n", r.n},
                           {"us", r.seconds * 1e6},
                           {"gbps", r.gbps},
                           {"copy_us", r.copy_seconds * 1e6},
                           {"copy_gbps", r.copy_gbps}});
    }
    if (o.json) {
      print_json({{"bench", "silu"}, {"device", "cpu"}, {"cpu", cpu_model()}, {"rows", json_rows}});
    } else {
      std::printf(
          "SiLU float32 on the CPU (%s): median time per call against a memcpy moving the same "
          "bytes\n",
          cpu_model().c_str());
      bench::print_table({"op", "threads", "n", "us", "GB/s", "copy_us", "copy_GB/s", "of_copy"},
                         table);
    }
  } else {
    DType t = DType::Float32;
    if (s.dtype == "bfloat16")
      t = DType::BFloat16;
    else
      MT_CHECK(s.dtype == "float32", "[bench silu] --dtype must be float32 or bfloat16, got {}",
               s.dtype);
    bench::CudaTiming timing{.warmup = s.warmup, .repeats = s.repeats};
    std::vector<bench::SiluCudaRow> rows;
    {
      bench::Progress progress("bench silu", sizes);
      rows = bench::silu_cuda_sweep(dev.index, {t}, lo, hi, timing, progress);
    }
    const std::string gpu = cuda::device_props(dev.index).name;
    plot.title = fmt::format("SiLU {} on {} ({}), median of {} (events, L2 flushed)", s.dtype,
                             dev.str(), gpu, s.repeats);
    plot.x_label = fmt::format("elements ({})", s.dtype);
    int color = 0;
    for (const char* pass : {"fwd", "bwd"}) {
      bench::Series v{.name = fmt::format("silu {}", pass), .color = color};
      bench::Series u{.name = fmt::format("unfused {}", pass), .color = color + 2};
      bench::Series c{
          .name = fmt::format("copy floor {}", pass), .reference = true, .color = color++};
      for (const auto& r : rows)
        if (r.pass == pass) {
          double n = std::ldexp(1.0, r.log2n);
          v.x.push_back(n), v.y.push_back(r.ms * 1e3);
          u.x.push_back(n), u.y.push_back(r.unfused_ms * 1e3);
          c.x.push_back(n), c.y.push_back(r.copy_ms * 1e3);
        }
      plot.series.push_back(std::move(v));
      plot.series.push_back(std::move(u));
      plot.series.push_back(std::move(c));
    }
    for (size_t i = 0; i < rows.size(); ++i) {
      const auto& r = rows[i];
      table.push_back({r.dtype, r.pass, fmt::format("2^{}", r.log2n), fmt::format("{:.4f}", r.ms),
                       fmt::format("{:.0f}", r.gbps), fmt::format("{:.1f}%", r.pct_copy),
                       fmt::format("{:.4f}", r.copy_ms), fmt::format("{:.4f}", r.unfused_ms),
                       fmt::format("{:.2f}x", r.speedup)});
      json_rows.push_back({{"dtype", r.dtype},
                           {"pass", r.pass},
                           {"log2n", r.log2n},
                           {"ms", r.ms},
                           {"gbps", r.gbps},
                           {"pct_copy", r.pct_copy},
                           {"copy_ms", r.copy_ms},
                           {"unfused_ms", r.unfused_ms},
                           {"speedup_unfused", r.speedup}});
    }
    if (o.json) {
      print_json({{"bench", "silu"}, {"device", dev.str()}, {"gpu", gpu}, {"rows", json_rows}});
    } else {
      std::printf(
          "SiLU %s on %s (%s): median of %d runs (events, L2 flushed), against a device copy of "
          "the same bytes\n",
          s.dtype.c_str(), dev.str().c_str(), gpu.c_str(), s.repeats);
      bench::print_table(
          {"dtype", "pass", "n", "ms", "GB/s", "of_copy", "copy_ms", "unfused_ms", "vs_unfused"},
          table);
    }
  }
  if (!o.plot.empty()) write_plot(o.plot, bench::svg(plot));
  return 0;
}

int bench_matmul(const SweepOptions& s, const BenchOutput& o) {
  Device dev = bench_device(s.device, "bench matmul");
  const int lo = s.min_log2 >= 0 ? s.min_log2 : 6;
  const int hi = s.max_log2 >= 0 ? s.max_log2 : dev.is_cuda() ? 13 : 10;
  MT_CHECK(lo <= hi && hi <= 15,
           "[bench matmul] need --min-log2 <= --max-log2 <= 15, got {} and {}", lo, hi);
  std::vector<int64_t> sizes;
  for (int lg = lo; lg <= hi; ++lg) sizes.push_back(int64_t(1) << lg);
  std::vector<bench::MatmulRow> rows;
  std::string where;
  if (dev.is_cpu()) {
    const auto threads = thread_counts(s);
    bench::Progress progress("bench matmul",
                             int(sizes.size() * threads.size()) * (cpu::have_blas() ? 2 : 1));
    rows = bench::matmul_cpu_sweep(sizes, threads, true, progress, s.min_time);
    where = fmt::format("the CPU ({})", cpu_model());
  } else {
    bench::Progress progress("bench matmul", int(sizes.size()));
    rows = bench::matmul_cuda_sweep(dev.index, sizes, {.warmup = s.warmup, .repeats = s.repeats},
                                    progress);
    where = fmt::format("{} ({})", dev.str(), cuda::device_props(dev.index).name);
  }
  bench::LinePlot plot{.title = fmt::format("matmul float32, n x n @ n x n, on {}", where),
                       .x_label = "n",
                       .y_label = "time per call (ms)"};
  std::vector<std::string> variants;
  for (const auto& r : rows) {
    std::string v = r.threads ? fmt::format("{} {}T", r.path, r.threads) : r.path;
    if (std::find(variants.begin(), variants.end(), v) == variants.end()) variants.push_back(v);
  }
  for (const std::string& v : variants) {
    bench::Series sr{.name = v};
    for (const auto& r : rows)
      if ((r.threads ? fmt::format("{} {}T", r.path, r.threads) : r.path) == v)
        sr.x.push_back(double(r.size)), sr.y.push_back(r.seconds * 1e3);
    plot.series.push_back(std::move(sr));
  }
  // The copy floor, from the first variant's measurements (one copy per size is enough).
  bench::Series floor{.name = "copy floor (A, B, C bytes)", .reference = true};
  for (const auto& r : rows)
    if ((r.threads ? fmt::format("{} {}T", r.path, r.threads) : r.path) == variants.front())
      floor.x.push_back(double(r.size)), floor.y.push_back(r.copy_seconds * 1e3);
  plot.series.push_back(std::move(floor));
  if (!o.plot.empty()) write_plot(o.plot, bench::svg(plot));
  if (o.json) {
    Json json_rows = Json::array();
    for (const auto& r : rows)
      json_rows.push_back({{"size", r.size},
                           {"path", r.path},
                           {"threads", r.threads},
                           {"ms", r.seconds * 1e3},
                           {"gflops", r.gflops},
                           {"copy_ms", r.copy_seconds * 1e3}});
    print_json({{"bench", "matmul"}, {"device", dev.str()}, {"where", where}, {"rows", json_rows}});
    return 0;
  }
  std::printf(
      "matmul float32 (n x n @ n x n) on %s: median time per call, and a copy of the bytes it must "
      "move\n",
      where.c_str());
  std::vector<std::vector<std::string>> table;
  for (const auto& r : rows)
    table.push_back({fmt::format("{}", r.size), r.path,
                     r.threads ? fmt::format("{}", r.threads) : "-",
                     fmt::format("{:.3f}", r.seconds * 1e3), fmt::format("{:.1f}", r.gflops),
                     fmt::format("{:.3f}", r.copy_seconds * 1e3)});
  bench::print_table({"n", "path", "threads", "ms", "GFLOP/s", "copy_floor_ms"}, table);
  return 0;
}

}  // namespace

void add_bench_silu_matmul(BenchGroup& bench) {
  auto [b_silu, silu_o] = bench.add<SweepOptions>(
      "silu", "SiLU forward and fused backward over sizes, against a copy of the same bytes",
      [](const SweepOptions& s, const BenchOutput& o) {
        return bench_silu(clamp_thread_counts(s), o);
      });
  auto [b_matmul, matmul_o] = bench.add<SweepOptions>(
      "matmul", "square float32 matmul over sizes: time, GFLOP/s, copy floor",
      [](const SweepOptions& s, const BenchOutput& o) {
        return bench_matmul(clamp_thread_counts(s), o);
      });
  for (auto [sub, o] : {std::pair{b_silu, silu_o}, std::pair{b_matmul, matmul_o}}) {
    add_device_option(*sub, o->device, "cpu or cuda (cuda:N)");
    const int most_log2 = sub == b_silu ? 32 : 15;
    sub->add_option("--min-log2", o->min_log2,
                    "smallest size, as a power of two (silu 12, matmul 6)")
        ->check(CLI::Range(0, most_log2));
    sub->add_option(
           "--max-log2", o->max_log2,
           "largest size, as a power of two (silu: cpu 24, cuda 28; matmul: cpu 10, cuda 13)")
        ->check(CLI::Range(0, most_log2));
    sub->add_option("--threads", o->threads,
                    "CPU: thread counts to run, e.g. --threads 1,2 (default: the kernels' count; "
                    "at most the machine's)")
        ->delimiter(',')
        ->check(CLI::Range(1, 1 << 20));
    sub->add_option("--min-time", o->min_time, "CPU: seconds of repeats per figure, at least")
        ->capture_default_str()
        ->check(CLI::Range(1e-6, 3600.0));
    sub->add_option("--repeats", o->repeats, "CUDA: timed runs per figure (median)")
        ->capture_default_str()
        ->check(CLI::Range(1, 1000000));
    sub->add_option("--warmup", o->warmup, "CUDA: untimed runs first")
        ->capture_default_str()
        ->check(CLI::Range(0, 1000000));
  }
  b_silu->add_option("--dtype", silu_o->dtype, "CUDA: float32 or bfloat16 (the CPU runs float32)")
      ->capture_default_str();
}

}  // namespace mt::cli
