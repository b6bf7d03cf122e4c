// SPDX-License-Identifier: MIT
// `minitensor bench vmap`: per-sample gradients, vmap(grad) against a loop of grad calls,
// and the fallback for an op without a batching rule against the loop it replaces.
#include <chrono>
#include <cstdio>

#include "examples/per_sample.h"
#include "tools/bench/host_loop.h"
#include "tools/bench/plot.h"
#include "tools/cli/cli.h"

namespace mt::cli {
namespace {

struct VmapCliOptions {
  std::string device = "cpu";
  int repeats = 11;
};

// Per-sample gradients of the 64/32/64 MLP at batch 64: vmap(grad) against a loop of 64
// grad calls, alternating, medians side by side.
int bench_vmap_cmd(const VmapCliOptions& v, const BenchOutput& o) {
  Device dev = bench_device(v.device, "bench vmap");
  const mlp::Shape shape{.batch = 64, .in = 32, .hidden = 64, .out = 1};
  manual_seed(0);
  const mlp::Task task = mlp::teacher_task(shape, dev);
  const mlp::Model m = mlp::init(shape, dev);
  auto once = [&](auto&& fn) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    if (dev.is_cuda()) cuda::synchronize(dev.index);
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  auto run_vmap = [&] { (void)mlp::per_sample_grads_vmap(m, task.x, task.target); };
  auto run_loop = [&] { (void)mlp::per_sample_grads_loop(m, task.x, task.target); };
  // Where vmap(grad)'s time goes: a call at batch 1 against one grad call (vmap's fixed
  // cost), and the first layer's per-sample weight gradient alone (one [B, in, 1] @
  // [B, 1, hidden] matmul, the largest product of the batched backward).
  const Tensor x1 = task.x.slice(0, 0, 1), t1 = task.target.slice(0, 0, 1);
  auto run_vmap1 = [&] { (void)mlp::per_sample_grads_vmap(m, x1, t1); };
  auto run_grad1 = [&] { (void)mlp::per_sample_grads_loop(m, x1, t1); };
  const Tensor col = mt::randn({shape.batch, shape.in, 1}).to(dev);
  const Tensor row = mt::randn({shape.batch, 1, shape.hidden}).to(dev);
  auto run_outer = [&] { (void)mt::matmul(col, row); };
  once(run_vmap);  // warm-up (and the CUDA kernels' first compile)
  once(run_loop);
  once(run_vmap1);
  once(run_grad1);
  once(run_outer);
  std::vector<double> tv, tl, tv1, tg1, to;
  for (int r = 0; r < v.repeats; ++r) {
    tv.push_back(once(run_vmap));
    tl.push_back(once(run_loop));
    tv1.push_back(once(run_vmap1));
    tg1.push_back(once(run_grad1));
    to.push_back(once(run_outer));
  }
  // The slow fallback: an op without a rule under vmap, against the loop it replaces
  // (one call per row, the results copied into one tensor).
  // (mt::sum runs on either device: the same function is its CPU and its CUDA kernel)
  static const auto rowsum = [] {
    auto op = mt::custom_op("bench_vmap::rowsum", [](const Tensor& x) { return mt::sum(x, {-1}); });
    op.register_kernel(DeviceType::CUDA, [](const Tensor& x) { return mt::sum(x, {-1}); });
    return op;
  }();
  const Tensor rows = mt::randn({shape.batch, 256, 64}).to(dev);
  auto run_fallback = [&] {
    (void)mt::vmap([&](const std::vector<Tensor>& a) { return std::vector<Tensor>{rowsum(a[0])}; })(
        {rows});
  };
  auto run_rows = [&] {
    Tensor out = mt::empty({shape.batch, 256}, {.device = dev});
    for (int64_t i = 0; i < shape.batch; ++i) out.select(0, i).copy_(rowsum(rows.select(0, i)));
  };
  dispatcher().set_log_sink([](std::string_view) {});  // the fallback's one-time warning
  once(run_fallback);
  dispatcher().set_log_sink(nullptr);
  once(run_rows);
  std::vector<double> tf, tr;
  for (int r = 0; r < v.repeats; ++r) {
    tf.push_back(once(run_fallback));
    tr.push_back(once(run_rows));
  }
  const double mv = bench::median(tv), ml = bench::median(tl), mf = bench::median(tf),
               mr = bench::median(tr), mv1 = bench::median(tv1), mg1 = bench::median(tg1),
               mo = bench::median(to);
  const std::string where =
      dev.is_cuda() ? fmt::format("{} ({})", dev.str(), cuda::device_props(dev.index).name)
                    : cpu_model();
  if (!o.plot.empty()) {
    bench::BarPlot plot{
        .title = fmt::format("per-sample gradients, 64/32/64 MLP, batch 64, on {}", where),
        .value_label = "ms (median)"};
    plot.bars.push_back({"vmap(grad)", mv});
    plot.bars.push_back({"loop of 64 grad calls", ml});
    plot.bars.push_back({"an op without a rule under vmap (the fallback)", mf});
    plot.bars.push_back({"the loop it replaces", mr});
    write_plot(o.plot, bench::svg(plot));
  }
  if (o.json) {
    print_json({{"bench", "vmap"},
                {"device", dev.str()},
                {"where", where},
                {"repeats", v.repeats},
                {"vmap_ms", mv},
                {"loop_ms", ml},
                {"loop_over_vmap", ml / mv},
                {"fallback_ms", mf},
                {"rows_loop_ms", mr},
                {"fallback_over_loop", mf / mr},
                {"vmap_batch1_ms", mv1},
                {"grad_call_ms", mg1},
                {"vmap_batch1_over_grad_call", mv1 / mg1},
                {"weight_grad_matmul_ms", mo},
                {"weight_grad_matmul_share", mo / mv}});
    return 0;
  }
  std::printf(
      "per-sample gradients of the 64/32/64 MLP at batch 64 on %s, median of %d (alternating)\n",
      where.c_str(), v.repeats);
  std::printf("  vmap(grad)              %9.3f ms\n", mv);
  std::printf("  loop of 64 grad calls   %9.3f ms\n", ml);
  std::printf("  loop / vmap             %9.2fx   (goal: at least 10)\n", ml / mv);
  std::printf("where vmap(grad)'s time goes\n");
  std::printf("  vmap(grad) at batch 1   %9.3f ms   (%.2f grad calls: vmap's fixed cost)\n", mv1,
              mv1 / mg1);
  std::printf("  one grad call           %9.3f ms\n", mg1);
  std::printf(
      "  weight-gradient matmul  %9.3f ms   %.0f%% of vmap(grad): the first layer's "
      "per-sample weight gradient, one [%lld, %lld, 1] @ [%lld, 1, %lld] matmul\n",
      mo, 100 * mo / mv, (long long)shape.batch, (long long)shape.in, (long long)shape.batch,
      (long long)shape.hidden);
  std::printf(
      "an op without a batching rule (a row sum of [64, 256, 64]) under vmap, against the loop it "
      "replaces\n");
  std::printf("  the fallback            %9.3f ms\n", mf);
  std::printf("  64 calls, copied        %9.3f ms\n", mr);
  std::printf("  fallback / loop         %9.2fx   (goal: at most 1.05)\n", mf / mr);
  return 0;
}

}  // namespace

void add_bench_vmap(BenchGroup& bench) {
  auto [b_vmap, v] = bench.add<VmapCliOptions>(
      "vmap",
      "per-sample gradients of the 64/32/64 MLP at batch 64: vmap(grad) against a loop of 64 "
      "grad calls",
      bench_vmap_cmd);
  add_device_option(*b_vmap, v->device, "cpu or cuda (cuda:N)");
  add_repeats_option(*b_vmap, v->repeats, "timed runs of each (median)");
}

}  // namespace mt::cli
