// SPDX-License-Identifier: MIT
// `minitensor bench mlp`: ms per training step of examples/mlp.h's MLP; --compile: eager
// and through mt::compile side by side.
#include <cstdio>
#include <map>

#include "kernels/cpu/cpu_kernels.h"
#include "tools/bench/mlp.h"
#include "tools/bench/plot.h"
#include "tools/bench/table.h"
#include "tools/cli/cli.h"

namespace mt::cli {
namespace {

struct MlpCliOptions {
  std::string device = "cpu";
  std::vector<std::string> shapes = {"64x32x64", "4096x1024x4096"};
  bench::MlpOptions opts;
  int warmup = -1, steps = -1;  // -1: 5 and 50
  bool compile = false;         // eager and mt::compile side by side
  bool op_times = false;        // where a step's time goes, op by op
  std::string autocast;         // "bfloat16", "float16", or empty: off
};

// bench mlp --compile: the eager step and the same step through mt::compile, alternating.
int bench_mlp_compile_cmd(const MlpCliOptions& m, const bench::MlpOptions& opts,
                          const BenchOutput& o) {
  Device dev = bench_device(m.device, "bench mlp --compile");
  std::vector<bench::MlpCompileRow> rows;
  {
    bench::Progress progress("bench mlp --compile", int(m.shapes.size()));
    for (const std::string& s : m.shapes) {
      const mlp::Shape sh = *parse_mlp_shape(s);
      progress.step(fmt::format("{}x{}x{} on {}", sh.batch, sh.in, sh.hidden, dev.str()));
      rows.push_back(bench::bench_mlp_compile(sh, dev, opts));
    }
  }
  const std::string where =
      dev.is_cuda() ? fmt::format("{} ({})", dev.str(), cuda::device_props(dev.index).name)
                    : fmt::format("cpu ({}, {} threads)", cpu_model(), cpu::num_threads());
  auto label = [](const mlp::Shape& s) { return fmt::format("{}/{}/{}", s.batch, s.in, s.hidden); };
  // The user's x * sigmoid(x), compiled into one kernel, against mt::silu.
  const int lo = dev.is_cuda() ? 20 : 16, hi = dev.is_cuda() ? 26 : 18;
  const std::vector<bench::CompiledSiluRow> silu_rows = bench::bench_compiled_silu(dev, lo, hi);
  if (!o.plot.empty()) {
    bench::BarPlot plot{
        .title = fmt::format("MLP training step, eager and through mt::compile, on {}", where),
        .value_label = "ms per step (median)"};
    for (const auto& r : rows) {
      plot.bars.push_back({"eager " + label(r.shape), r.eager_ms});
      plot.bars.push_back({"compiled " + label(r.shape), r.compiled_ms});
    }
    write_plot(o.plot, bench::svg(plot));
  }
  if (o.json) {
    Json silu_json = Json::array();
    for (const auto& r : silu_rows)
      silu_json.push_back({{"log2n", r.log2n},
                           {"silu_ms", r.silu_ms},
                           {"compiled_ms", r.compiled_ms},
                           {"eager_ms", r.eager_ms},
                           {"fusion_groups", r.fusion_groups},
                           {"max_diff", r.max_diff}});
    Json json_rows = Json::array();
    for (const auto& r : rows)
      json_rows.push_back({{"batch", r.shape.batch},
                           {"in", r.shape.in},
                           {"hidden", r.shape.hidden},
                           {"steps", r.steps},
                           {"eager_ms", r.eager_ms},
                           {"compiled_ms", r.compiled_ms},
                           {"speedup", r.eager_ms / r.compiled_ms},
                           {"first_call_ms", r.first_call_ms},
                           {"second_compile_ms", r.second_compile_ms},
                           {"nodes", r.nodes},
                           {"fusion_groups", r.fusion_groups},
                           {"bitwise_equal", r.bitwise_equal},
                           {"max_param_diff", r.max_param_diff}});
    print_json({{"bench", "mlp --compile"},
                {"device", dev.str()},
                {"where", where},
                {"lr", opts.lr},
                {"rows", json_rows},
                {"silu", silu_json}});
    return 0;
  }
  std::printf(
      "examples/mlp.h's training step, eager and through mt::compile (steps alternating, each\n"
      "timed alone; median ms per step after warm-up), on %s\n",
      where.c_str());
  std::vector<std::vector<std::string>> table;
  for (const auto& r : rows)
    table.push_back(
        {label(r.shape), fmt::format("{}", r.steps), fmt::format("{:.4f}", r.eager_ms),
         fmt::format("{:.4f}", r.compiled_ms), fmt::format("{:.2f}x", r.eager_ms / r.compiled_ms),
         fmt::format("{:.1f}", r.first_call_ms), fmt::format("{:.1f}", r.second_compile_ms),
         fmt::format("{}/{}", r.nodes, r.fusion_groups),
         r.bitwise_equal ? "bitwise" : fmt::format("max diff {:.2g}", r.max_param_diff)});
  bench::print_table({"batch/in/hidden", "steps", "eager ms", "compiled ms", "speedup",
                      "1st call ms", "2nd compile ms", "nodes/fused", "params vs eager"},
                     table);
  std::printf(
      "\na user's unfused x * sigmoid(x) through mt::compile, against mt::silu and the same\n"
      "expression eager (float32; median ms)\n");
  std::vector<std::vector<std::string>> silu_table;
  for (const auto& r : silu_rows)
    silu_table.push_back({fmt::format("2^{}", r.log2n), fmt::format("{:.4f}", r.silu_ms),
                          fmt::format("{:.4f}", r.compiled_ms),
                          fmt::format("{:.3f}", r.compiled_ms / r.silu_ms),
                          fmt::format("{:.4f}", r.eager_ms), fmt::format("{}", r.fusion_groups),
                          fmt::format("{:.2g}", r.max_diff)});
  bench::print_table({"n", "mt::silu ms", "compiled ms", "compiled/silu", "eager x*sigmoid(x) ms",
                      "fused groups", "max diff"},
                     silu_table);
  return 0;
}

// bench mlp --op-times: each shape's step, op by op.
int bench_mlp_op_times_cmd(const std::vector<mlp::Shape>& shapes, Device dev,
                           const bench::MlpOptions& opts, const BenchOutput& o) {
  const std::string where =
      dev.is_cuda() ? fmt::format("{} ({})", dev.str(), cuda::device_props(dev.index).name)
                    : fmt::format("cpu ({}, {} threads)", cpu_model(), cpu::num_threads());
  Json json_shapes = Json::array();
  for (const mlp::Shape& sh : shapes) {
    const bench::OpTimes t = bench::mlp_op_times(sh, dev, opts);
    double total = 0;
    for (const auto& r : t.rows) total += r.ms_per_step;
    if (o.json) {
      Json rows = Json::array();
      for (const auto& r : t.rows)
        rows.push_back({{"op", r.op},
                        {"inputs", r.inputs},
                        {"calls_per_step", r.calls_per_step},
                        {"ms_per_step", r.ms_per_step}});
      json_shapes.push_back({{"batch", sh.batch},
                             {"in", sh.in},
                             {"hidden", sh.hidden},
                             {"steps", t.steps},
                             {"step_ms", t.step_ms},
                             {"ops_ms", total},
                             {"ops", rows}});
      continue;
    }
    std::printf(
        "%lld/%lld/%lld on %s: %d steps under an op timer, median %.3f ms a step; the ops' "
        "means a step, %.3f ms in all%s:\n",
        (long long)sh.batch, (long long)sh.in, (long long)sh.hidden, where.c_str(), t.steps,
        t.step_ms, total, dev.is_cuda() ? " (the device synchronized after each op)" : "");
    std::vector<std::vector<std::string>> table;
    for (const auto& r : t.rows)
      table.push_back({r.op, r.inputs, fmt::format("{:g}", r.calls_per_step),
                       fmt::format("{:.4f}", r.ms_per_step),
                       fmt::format("{:.1f}%", 100 * r.ms_per_step / std::max(total, 1e-12))});
    bench::print_table({"op", "inputs", "calls/step", "ms/step", "share"}, table);
    std::printf("\n");
  }
  if (o.json)
    print_json({{"bench", "mlp --op-times"},
                {"device", dev.str()},
                {"where", where},
                {"shapes", json_shapes}});
  return 0;
}

int bench_mlp_cmd(const MlpCliOptions& m, const BenchOutput& o) {
  Device dev = bench_device(m.device, "bench mlp");
  std::vector<mlp::Shape> shapes;
  for (const std::string& s : m.shapes) shapes.push_back(*parse_mlp_shape(s));  // checked by CLI11
  bench::MlpOptions opts = m.opts;
  if (m.warmup >= 0) opts.warmup = m.warmup;
  if (m.steps >= 0) opts.steps = m.steps;
  if (!m.autocast.empty())
    opts.autocast = m.autocast == "float16" ? DType::Float16 : DType::BFloat16;
  if (m.compile) return bench_mlp_compile_cmd(m, opts, o);
  if (m.op_times) return bench_mlp_op_times_cmd(shapes, dev, opts, o);
  std::vector<bench::MlpRow> rows;
  {
    bench::Progress progress("bench mlp", int(shapes.size()));
    for (const mlp::Shape& sh : shapes) {
      progress.step(fmt::format("{}x{}x{} on {}", sh.batch, sh.in, sh.hidden, dev.str()));
      rows.push_back(bench::bench_mlp(sh, dev, opts));
    }
  }
  const std::string where =
      dev.is_cuda() ? fmt::format("{} ({})", dev.str(), cuda::device_props(dev.index).name)
                    : fmt::format("cpu ({}, {} threads)", cpu_model(), cpu::num_threads());
  auto label = [](const mlp::Shape& s) { return fmt::format("{}/{}/{}", s.batch, s.in, s.hidden); };
  if (!o.plot.empty()) {
    bench::BarPlot plot{
        .title = fmt::format("MLP training step (forward, MSE, backward, SGD) on {}", where),
        .value_label = "ms per step (median)"};
    for (const auto& r : rows)
      plot.bars.push_back({"batch/in/hidden " + label(r.shape), r.ms_median});
    write_plot(o.plot, bench::svg(plot));
  }
  if (o.json) {
    Json json_rows = Json::array();
    for (const auto& r : rows)
      json_rows.push_back({{"batch", r.shape.batch},
                           {"in", r.shape.in},
                           {"hidden", r.shape.hidden},
                           {"out", r.shape.out},
                           {"steps", r.steps},
                           {"ms_median", r.ms_median},
                           {"ms_min", r.ms_min},
                           {"ms_max", r.ms_max},
                           {"loss_first", r.loss_first},
                           {"loss_last", r.loss_last}});
    print_json({{"bench", "mlp"},
                {"sgd", opts.sgd == mlp::Sgd::Foreach ? "foreach" : "loop"},
                {"device", dev.str()},
                {"where", where},
                {"lr", opts.lr},
                {"autocast", opts.autocast == DType::Float32 ? "off" : dtype_name(opts.autocast)},
                {"rows", json_rows}});
    return 0;
  }
  std::printf(
      "two-layer MLP with SiLU (output dim = in), one SGD training step: forward, mse_loss, "
      "backward,\n"
      "update under NoGradGuard (%s), zero grads%s; median ms per step after warm-up, on %s\n",
      opts.sgd == mlp::Sgd::Foreach ? "one foreach_add_" : "a sub_ a parameter",
      opts.autocast == DType::Float32
          ? ""
          : fmt::format(", each step under autocast {}", dtype_name(opts.autocast)).c_str(),
      where.c_str());
  std::vector<std::vector<std::string>> table;
  for (const auto& r : rows)
    table.push_back({label(r.shape), fmt::format("{}", r.shape.out), fmt::format("{}", r.steps),
                     fmt::format("{:.3f}", r.ms_median), fmt::format("{:.3f}", r.ms_min),
                     fmt::format("{:.3f}", r.ms_max),
                     fmt::format("{:.4g} -> {:.4g}", r.loss_first, r.loss_last)});
  bench::print_table(
      {"batch/in/hidden", "out", "steps", "ms/step", "min", "max", "loss (timed steps)"}, table);
  return 0;
}

}  // namespace

void add_bench_mlp(BenchGroup& bench) {
  auto [b_mlp, m] = bench.add<MlpCliOptions>(
      "mlp", "ms per training step of examples/mlp.h's two-layer MLP (64/32/64, 4096/1024/4096)",
      bench_mlp_cmd);
  add_device_option(*b_mlp, m->device, "cpu or cuda (cuda:N)");
  b_mlp
      ->add_option("--sgd", m->opts.sgd,
                   "the update: foreach (one mt::foreach_add_ over all parameters) or loop (one "
                   "mt::sub_ a parameter)")
      ->transform(
          CLI::CheckedTransformer(std::map<std::string, mlp::Sgd>{{"foreach", mlp::Sgd::Foreach},
                                                                  {"loop", mlp::Sgd::Loop}})
              .description(""))  // CLI11 would show {foreach->0,loop->1}
      ->type_name("foreach|loop")
      ->default_str("foreach");
  CLI::Option* autocast =
      b_mlp
          ->add_option("--autocast", m->autocast,
                       "run each step (forward, backward, update) under AutocastGuard with this "
                       "lower precision")
          ->check(CLI::IsMember({"bfloat16", "float16"}))
          ->type_name("bfloat16|float16");
  b_mlp->add_option("--shape", m->shapes, "BATCHxINxHIDDEN, repeatable (output dim = IN)")
      ->capture_default_str()
      ->check(CLI::Validator(
          [](std::string& v) {
            return parse_mlp_shape(v) ? std::string()
                                      : "--shape takes BATCHxINxHIDDEN (e.g. 64x32x64), each from "
                                        "1 to 2^31 - 1 and no "
                                        "product of two over 2^31, got " +
                                            mt::quoted(v);
          },
          "BATCHxINxHIDDEN"));
  b_mlp
      ->add_option("--steps", m->steps,
                   "timed steps, at most (default 50; fewer past --max-seconds)")
      ->check(CLI::Range(1, 1000000));
  b_mlp->add_option("--warmup", m->warmup, "untimed steps first (default 5)")
      ->check(CLI::Range(0, 1000000));
  b_mlp
      ->add_option("--max-seconds", m->opts.max_seconds,
                   "per shape: stop timing after this long (3 timed steps at least)")
      ->capture_default_str()
      ->check(CLI::Range(1e-3, 86400.0));
  b_mlp
      ->add_flag("--compile", m->compile,
                 "the step eager and through mt::compile side by side (speedup, first-call time, "
                 "same parameters)")
      ->excludes(autocast);
  b_mlp
      ->add_flag("--op-times", m->op_times,
                 "where a step's time goes: each op's kernels timed under a dispatch mode, by op "
                 "and input shapes (on CUDA synchronized after each op)")
      ->excludes("--compile");
}

}  // namespace mt::cli
