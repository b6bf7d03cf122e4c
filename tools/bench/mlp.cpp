// SPDX-License-Identifier: MIT
#include "tools/bench/mlp.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <utility>

#include "tools/bench/timing.h"

namespace mt::bench {

MlpRow bench_mlp(const mlp::Shape& shape, Device device, const MlpOptions& opts) {
  check_device(device, "bench mlp");
  auto sync = [&] {
    if (device.is_cuda()) cuda::synchronize(device.index);
  };
  manual_seed(0);
  mlp::Task task = mlp::teacher_task(shape, device);
  mlp::Model model = mlp::init(shape, device);
  auto train_step = [&] {
    std::optional<AutocastGuard> autocast;  // forward, backward and update, as examples/ do
    if (opts.autocast != DType::Float32) autocast.emplace(device.type, opts.autocast);
    return mlp::train_step(model, task.x, task.target, opts.lr, opts.sgd);
  };
  Tensor loss;
  // Warm-up: opts.warmup steps, or fewer once half of max_seconds is spent (slow CPU shapes).
  auto warm_begin = Clock::now();
  for (int i = 0;; ++i) {
    const double spent = std::chrono::duration<double>(Clock::now() - warm_begin).count();
    if (i >= std::max(1, opts.warmup) && spent >= opts.min_warmup_seconds) break;
    if (i >= 1 && spent > opts.max_seconds / 2) break;
    loss = train_step();
    sync();
  }
  std::vector<double> ms;
  Tensor first_loss;
  std::optional<ModeGuard> mode;
  if (opts.timed_under != nullptr) mode.emplace(*opts.timed_under);
  auto begin = Clock::now();
  while (int(ms.size()) < std::max(1, opts.min_steps) ||
         (int(ms.size()) < opts.steps &&
          std::chrono::duration<double>(Clock::now() - begin).count() < opts.max_seconds)) {
    auto t0 = Clock::now();
    loss = train_step();
    sync();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    if (!first_loss.defined()) first_loss = loss;
  }
  mode.reset();
  MlpRow r{shape,
           device.str(),
           int(ms.size()),
           median(ms),
           *std::min_element(ms.begin(), ms.end()),
           *std::max_element(ms.begin(), ms.end()),
           first_loss.item<double>(),
           loss.item<double>()};
  return r;
}

namespace {
// Times every op call below Autograd (Note [Dispatch modes]): the ops a step calls, and the
// ones its backward calls. An op's kernels may call ops of their own: those run below this
// mode, inside the caller's time, so no time is counted twice.
class OpTimer : public DispatchMode {
 public:
  explicit OpTimer(Device device) : device_(device) {}
  void dispatch(const OperatorHandle& op, Stack& stack) override {
    std::string inputs;
    for (const Value& v : stack) {
      if (!v.is_tensor() || !v.to_tensor().defined()) continue;
      const Tensor& t = v.to_tensor();
      inputs += fmt::format("{}{} ", t.dtype(), t.sizes());
    }
    if (!inputs.empty()) inputs.pop_back();
    const auto t0 = Clock::now();
    redispatch(op, stack);
    if (device_.is_cuda()) cuda::synchronize(device_.index);
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    auto& e = times_[{op.name().str(), std::move(inputs)}];
    e.first += 1;
    e.second += ms;
  }
  std::string name() const override { return "OpTimer"; }
  std::map<std::pair<std::string, std::string>, std::pair<int64_t, double>> times_;

 private:
  Device device_;
};
}  // namespace

OpTimes mlp_op_times(const mlp::Shape& shape, Device device, const MlpOptions& opts) {
  check_device(device, "bench mlp --op-times");
  OpTimer timer(device);
  MlpOptions timed = opts;
  timed.timed_under = &timer;
  const MlpRow run = bench_mlp(shape, device, timed);
  OpTimes out{{}, run.steps, run.ms_median};
  const double n = double(run.steps);
  for (const auto& [key, v] : timer.times_)
    out.rows.push_back({key.first, key.second, double(v.first) / n, v.second / n});
  std::sort(out.rows.begin(), out.rows.end(),
            [](const OpTimeRow& a, const OpTimeRow& b) { return a.ms_per_step > b.ms_per_step; });
  return out;
}

MlpCompileRow bench_mlp_compile(const mlp::Shape& shape, Device device, const MlpOptions& opts) {
  check_device(device, "bench mlp --compile");
  auto sync = [&] {
    if (device.is_cuda()) cuda::synchronize(device.index);
  };
  manual_seed(0);
  mlp::Task task = mlp::teacher_task(shape, device);
  manual_seed(1);
  mlp::Model eager = mlp::init(shape, device);
  manual_seed(1);
  mlp::Model model = mlp::init(shape, device);
  const double lr = opts.lr;
  // The step of examples/mlp.h, with the data and the parameters as the compiled inputs.
  const GraphFn step = [lr](const std::vector<Tensor>& in) {
    mlp::Model m{in[2], in[3], in[4], in[5]};
    return std::vector<Tensor>{mlp::train_step(m, in[0], in[1], lr)};
  };
  auto inputs = [&](const mlp::Model& m) {
    return std::vector<Tensor>{task.x, task.target, m.w1, m.b1, m.w2, m.b2};
  };
  MlpCompileRow r{};
  r.shape = shape;
  r.device = device.str();
  Compiled compiled = mt::compile(step, {.name = "mlp step"});
  auto t0 = Clock::now();
  compiled(inputs(model));
  sync();
  r.first_call_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  mlp::train_step(eager, task.x, task.target, lr);
  {  // a second Compiled of the same step: capture and planning again, kernels cached
    manual_seed(1);
    mlp::Model scratch = mlp::init(shape, device);
    Compiled again = mt::compile(step);
    auto t1 = Clock::now();
    again(inputs(scratch));
    sync();
    r.second_compile_ms = std::chrono::duration<double, std::milli>(Clock::now() - t1).count();
  }
  std::vector<double> ems, cms;
  auto warm_begin = Clock::now();
  for (int i = 0;; ++i) {
    const double spent = std::chrono::duration<double>(Clock::now() - warm_begin).count();
    if (i >= std::max(1, opts.warmup) && spent >= opts.min_warmup_seconds) break;
    if (i >= 1 && spent > opts.max_seconds / 2) break;
    mlp::train_step(eager, task.x, task.target, lr);
    compiled(inputs(model));
    sync();
  }
  auto begin = Clock::now();
  while (int(ems.size()) < std::max(1, opts.min_steps) ||
         (int(ems.size()) < opts.steps &&
          std::chrono::duration<double>(Clock::now() - begin).count() < opts.max_seconds)) {
    auto t1 = Clock::now();
    mlp::train_step(eager, task.x, task.target, lr);
    sync();
    auto t2 = Clock::now();
    compiled(inputs(model));
    sync();
    auto t3 = Clock::now();
    ems.push_back(std::chrono::duration<double, std::milli>(t2 - t1).count());
    cms.push_back(std::chrono::duration<double, std::milli>(t3 - t2).count());
  }
  r.steps = int(ems.size());
  r.eager_ms = median(ems);
  r.compiled_ms = median(cms);
  r.nodes = compiled.num_nodes();
  r.fusion_groups = compiled.num_fusion_groups();
  r.bitwise_equal = true;
  r.max_param_diff = 0;
  const auto pe = eager.params(), pc = model.params();
  for (size_t i = 0; i < pe.size(); ++i) {
    Tensor a = pe[i].detach().cpu().contiguous(), b = pc[i].detach().cpu().contiguous();
    r.bitwise_equal = r.bitwise_equal && std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0;
    r.max_param_diff = std::max(r.max_param_diff, mt::max(mt::abs(a - b)).item<double>());
  }
  return r;
}

std::vector<CompiledSiluRow> bench_compiled_silu(Device device, int lo, int hi) {
  check_device(device, "bench mlp --compile");
  const GraphFn user = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{mt::mul(in[0], mt::sigmoid(in[0]))};
  };
  Compiled compiled = mt::compile(user, {.name = "x * sigmoid(x)"});
  std::vector<CompiledSiluRow> rows;
  for (int k = lo; k <= hi; ++k) {
    manual_seed(uint64_t(k));
    const Tensor x = randn({int64_t(1) << k}).to(device);
    CompiledSiluRow r{};
    r.log2n = k;
    auto time = [&](const std::function<void()>& f) {
      if (device.is_cuda()) return cuda_median_ms(device.index, {.warmup = 5, .repeats = 30}, f);
      return 1e3 * cpu_median_seconds(f, 5, 0.05, 200);
    };
    r.silu_ms = time([&] { Tensor y = mt::silu(x); });
    r.compiled_ms = time([&] { compiled(x); });
    r.eager_ms = time([&] { user({x}); });
    r.fusion_groups = compiled.num_fusion_groups();
    r.max_diff = mt::max(mt::abs(compiled(x)[0].cpu() - mt::silu(x).cpu())).item<double>();
    rows.push_back(r);
  }
  return rows;
}

}  // namespace mt::bench
