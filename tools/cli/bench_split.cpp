// SPDX-License-Identifier: MIT
// `minitensor bench split`: a step with a cudagraph_unsafe op in the middle, eager against
// mt::compile, and whether the CUDA graph was split (Note [bench split]).
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "tools/bench/host_loop.h"
#include "tools/bench/plot.h"
#include "tools/cli/cli.h"

namespace mt::cli {
namespace {

struct SplitCliOptions {
  std::string device = "cpu";
  int repeats = 21, calls = 20;
  int64_t batch = 64, width = 256;
};

// Note [bench split]
// A small MLP-like forward step with an op tagged cudagraph_unsafe in the middle, eager
// against mt::compile'd, timed side by side (alternating samples of `calls` calls each, then
// a synchronize; medians per call). On CUDA the compiled step replays two CUDA graphs with
// the unsafe op called eagerly between them (run_cuda_split in kernels/compile/replay.cpp);
// on the CPU there are no graphs and the plan calls the op through the dispatcher. Whether
// the graph was split is read from the compile log (MT_LOG=compile, collected through the
// dispatcher's log sink), not assumed.
int bench_split_cmd(const SplitCliOptions& sp, const BenchOutput& o) {
  Device dev = bench_device(sp.device, "bench split");
  // bench_split::scale: x * 0.5, the same function on both devices, tagged cudagraph_unsafe
  // (as an op that synchronizes or reads host state would be).
  static const auto unsafe = [] {
    auto fn = [](const Tensor& x) { return mt::mul(x, 0.5); };
    auto op = mt::custom_op("bench_split::scale", fn, {.tags = {Tag::cudagraph_unsafe}});
    op.register_kernel(DeviceType::CUDA, fn);
    op.register_fake([](const Tensor& x) { return mt::empty_like(x); });
    return op;
  }();
  GraphFn step = [](const std::vector<Tensor>& in) {
    Tensor h = mt::relu(mt::add(mt::matmul(in[0], in[1]), 0.1));
    h = unsafe(h);
    h = mt::silu(mt::mul(mt::matmul(h, in[2]), 2.0));
    return std::vector<Tensor>{mt::tanh(mt::matmul(h, in[3]))};
  };
  manual_seed(0);
  const int64_t b = sp.batch, w = sp.width;
  const double s = 1.0 / std::sqrt(double(w));
  const std::vector<Tensor> inputs = {
      mt::randn({b, w}).to(dev), mt::mul(mt::randn({w, w}), s).to(dev),
      mt::mul(mt::randn({w, w}), s).to(dev), mt::mul(mt::randn({w, w}), s).to(dev)};
  // The compile log of the first calls (compile, warm-up, the CUDA graphs' capture).
  const char* had_log = std::getenv("MT_LOG");
  const std::string saved_log = had_log ? had_log : "";
  ::setenv("MT_LOG", "compile", 1);
  std::vector<std::string> log_lines;
  dispatcher().set_log_sink([&](std::string_view l) { log_lines.emplace_back(l); });
  Compiled compiled = mt::compile(step, {.name = "split step"});
  double max_diff = 0;
  try {
    for (int i = 0; i < 3; ++i) {
      const Tensor want = step(inputs)[0].cpu();
      const Tensor got = compiled(inputs)[0].cpu();  // (the graph's buffer: read it now)
      max_diff = std::max(max_diff, mt::max(mt::abs(mt::sub(got, want))).item<double>());
    }
  } catch (...) {
    dispatcher().set_log_sink(nullptr);
    throw;
  }
  dispatcher().set_log_sink(nullptr);
  if (had_log)
    ::setenv("MT_LOG", saved_log.c_str(), 1);
  else
    ::unsetenv("MT_LOG");
  if (!saved_log.empty())  // the user asked for logs: pass them on
    for (const std::string& l : log_lines) dispatcher().log(l);
  // "captured a CUDA graph in N parts around M eager step(s)", or on the CPU "comes in up to
  // N parts" (where a CUDA graph would be split), or "no CUDA graph (why)".
  auto find_line = [&](std::string_view text) -> std::string {
    for (const std::string& l : log_lines)
      if (l.find(text) != std::string::npos) return l;
    return "";
  };
  auto number_before = [](const std::string& line, std::string_view word) {
    const size_t at = line.find(word);
    if (at == std::string::npos || at == 0) return 0;
    size_t start = at;
    while (start > 0 && std::isdigit(static_cast<unsigned char>(line[start - 1]))) --start;
    return start == at ? 0 : std::atoi(line.substr(start, at - start).c_str());
  };
  const std::string captured = find_line("captured a CUDA graph in ");
  const std::string no_graph = find_line(": no CUDA graph (");
  const std::string would = find_line("so a CUDA graph comes in up to ");
  const int parts = number_before(captured, " parts around");
  const bool split = parts >= 2;
  std::string split_line;
  if (split)
    split_line = fmt::format(
        "graph split: yes, {} CUDA graphs with the cudagraph_unsafe op called eagerly "
        "between them (compile log: \"{}\")",
        parts, captured);
  else if (!no_graph.empty())
    split_line =
        fmt::format("graph split: no, no CUDA graph was captured (compile log: \"{}\")", no_graph);
  else if (dev.is_cpu() && !would.empty())
    split_line = fmt::format(
        "graph split: no, the CPU replays no CUDA graph; the plan calls the "
        "cudagraph_unsafe op eagerly (compile log: \"{}\")",
        would);
  else
    split_line = "graph split: no, the compile log does not say the graph was split";
  auto once = [&](auto&& fn) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < sp.calls; ++i) fn();
    if (dev.is_cuda()) cuda::synchronize(dev.index);
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
               .count() /
           sp.calls;
  };
  auto run_eager = [&] { (void)step(inputs); };
  auto run_compiled = [&] { (void)compiled(inputs); };
  once(run_eager);
  once(run_compiled);
  std::vector<double> te, tc;
  for (int r = 0; r < sp.repeats; ++r) {
    te.push_back(once(run_eager));
    tc.push_back(once(run_compiled));
  }
  const double me = bench::median(te), mc = bench::median(tc);
  const std::string where =
      dev.is_cuda() ? fmt::format("{} ({})", dev.str(), cuda::device_props(dev.index).name)
                    : cpu_model();
  const std::string shape = fmt::format("batch {}, width {}", b, w);
  if (!o.plot.empty()) {
    bench::BarPlot plot{
        .title = fmt::format("a step with a cudagraph_unsafe op, {}, on {}", shape, where),
        .value_label = "ms per step (median)"};
    plot.bars.push_back({"eager", me});
    plot.bars.push_back({split ? "compiled (graph split in two)" : "compiled", mc});
    write_plot(o.plot, bench::svg(plot));
  }
  if (o.json) {
    print_json({{"bench", "split"},
                {"device", dev.str()},
                {"where", where},
                {"batch", b},
                {"width", w},
                {"repeats", sp.repeats},
                {"calls", sp.calls},
                {"eager_ms", me},
                {"compiled_ms", mc},
                {"eager_over_compiled", me / mc},
                {"split", split},
                {"graph_parts", parts},
                {"max_abs_diff", max_diff},
                {"split_line", split_line}});
    return 0;
  }
  std::printf(
      "3 matmuls, 5 pointwise ops and bench_split::scale (tagged cudagraph_unsafe) in the "
      "middle, %s, on %s;\nms per step, median of %d samples of %d calls (alternating)\n",
      shape.c_str(), where.c_str(), sp.repeats, sp.calls);
  std::printf("  eager                   %9.4f ms\n", me);
  std::printf("  mt::compile             %9.4f ms\n", mc);
  std::printf("  eager / compiled        %9.2fx   (above 1: the compiled step is faster)\n",
              me / mc);
  std::printf("  max |compiled - eager|  %9.2g\n", max_diff);
  std::printf("%s\n", split_line.c_str());
  return 0;
}

}  // namespace

void add_bench_split(BenchGroup& bench) {
  auto [b_split, sp] = bench.add<SplitCliOptions>(
      "split",
      "a step with a cudagraph_unsafe op in the middle: eager against mt::compile (on CUDA, a "
      "graph split in two), and whether it was split",
      bench_split_cmd);
  add_device_option(*b_split, sp->device, "cpu or cuda (cuda:N)");
  add_repeats_option(*b_split, sp->repeats, "timed samples of each (median)");
  b_split->add_option("--calls", sp->calls, "calls in each sample")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  b_split->add_option("--batch", sp->batch, "rows of the input")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  b_split->add_option("--width", sp->width, "the layers' width")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 14));
}

}  // namespace mt::cli
