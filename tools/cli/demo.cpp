// SPDX-License-Identifier: MIT
// `minitensor demo`: the tutorial's flow, step by step, with the tutorial's op (which
// `dump triton_demo::silu` shows too); --debug-mode: one MLP step under DebugMode.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "tools/cli/cli.h"

namespace mt::cli {
namespace {

// The op's CUDA kernel: the user's pointwise expression (jit::pointwise).
const jit::Pointwise& demo_silu_gpu() {
  static const jit::Pointwise f = jit::pointwise("triton_demo_silu", "x / (1.0f + expf(-x))");
  return f;
}

}  // namespace

// A CPU kernel of plain loops and, for CUDA tensors, the user's own GPU kernel as a
// pointwise expression.
CustomOp<Tensor(const Tensor&)> make_demo_op() {
  auto op = custom_op("triton_demo::silu", [](const Tensor& x) {
    Tensor xc = x.contiguous().to(DType::Float64);
    Tensor out = empty(x.sizes(), {.dtype = DType::Float64});
    const double* in = xc.data_ptr<double>();
    double* o = out.data_ptr<double>();
    for (int64_t i = 0; i < x.numel(); ++i) o[i] = in[i] / (1.0 + std::exp(-in[i]));
    return out.to(x.dtype());
  });
  op.register_kernel(DeviceType::CUDA, [](const Tensor& x) { return demo_silu_gpu()(x); });
  op.register_fake([](const Tensor& x) { return empty_like(x); });
  op.register_autograd(
      [](AutogradContext& ctx, const Tensor& g) { return silu_backward(g, ctx.saved()[0]); },
      [](AutogradContext& ctx, const Tensor& x, const Tensor&) { ctx.save_for_backward({x}); });
  return op;
}

namespace {

// `minitensor demo --debug-mode`: one training step of the 64/32/64 MLP under DebugMode,
// one line an op (forward and backward), then the same step's FlopCounterMode table.
int demo_debug_mode() {
  manual_seed(0);
  Tensor x = randn({64, 32}), target = randn({64, 4});
  Tensor w1 = mul(randn({32, 64}), 0.18).requires_grad_(), b1 = zeros({64}).requires_grad_();
  Tensor w2 = mul(randn({64, 4}), 0.125).requires_grad_(), b2 = zeros({4}).requires_grad_();
  auto step = [&] {
    Tensor loss = mse_loss(add(matmul(silu(add(matmul(x, w1), b1)), w2), b2), target);
    backward(loss);
    return loss;
  };
  std::printf(
      "== DebugMode: one MLP step (64/32/64), one line an op; #hash: FNV-1a of the values\n");
  DebugMode debug;
  {
    ModeGuard guard(debug);
    step();
  }
  std::printf("%s", debug.str().c_str());
  for (const Tensor& p : {w1, b1, w2, b2}) p.set_grad(Tensor());
  std::printf("\n== FlopCounterMode: the same step\n");
  FlopCounterMode flops;
  {
    ModeGuard guard(flops);
    step();
  }
  std::printf("%s", flops.table().c_str());
  return 0;
}

void step(int n, const char* what) { std::printf("\n== step %d: %s\n", n, what); }

int demo(const std::string& device_name) {
  Device dev(device_name);
  if (dev.is_cuda() && !cuda::is_available()) {
    std::fflush(stdout);
    std::fprintf(stderr, "minitensor demo: --device %s needs a GPU, but CUDA is unavailable: %s\n",
                 device_name.c_str(), cuda::unavailable_reason().c_str());
    return 1;
  }
  std::printf("The tutorial's flow, in C++, on %s.\n", dev.str().c_str());
  step(1,
       "register: custom_op(\"triton_demo::silu\", fn) defines the op, fn is its CPU kernel; "
       "register_kernel(CUDA, ...) adds the user's GPU kernel (a pointwise expression)");
  auto op = make_demo_op();
  std::printf("schema: %s\n", op.schema().str().c_str());
  std::printf("%s", dispatcher().dump_table("triton_demo::silu").c_str());

  step(2, "fake: register_fake gave it a shape function; fake tensors carry no data");
  Tensor f = fake_empty({2, 3}, {.device = Device("cuda:0")});
  std::printf("silu(fake cuda:0 [2, 3]) = %s\n", op(f).str().c_str());

  step(3, "autograd: register_autograd records a tape entry; backward walks it");
  Tensor x = linspace(-2, 2, 5).to(dev).requires_grad_();
  Tensor y = op(x);
  Tensor loss = sum(y);
  std::printf("tape:\n%s", mt::dump_tape().c_str());
  backward(loss);
  std::printf("x.grad = %s\n", x.grad().str().c_str());

  step(4, "check: compare with mt::silu and x * sigmoid(x)");
  std::printf("max |diff| vs mt::silu: %.3g\n", max_abs_diff(op(x.detach()), silu(x.detach())));

  step(5, "gradcheck: float64 central differences against the tape's gradient");
  Tensor xd = randn({6}, {.dtype = DType::Float64}).to(dev).requires_grad_();
  auto gc = gradcheck([&](const std::vector<Tensor>& in) { return op(in[0]); }, {xd});
  std::printf("gradcheck: %s %s\n", gc.ok ? "PASS" : "FAIL", gc.message.c_str());

  step(6, "opcheck: schema, fake vs real, autograd registration, gradcheck");
  std::printf("%s", opcheck(op.handle(), {Stack{randn({3, 4}).to(dev)}}).str().c_str());

  step(7, "the dispatch trace of one call that requires grad (MT_TRACE=dispatch)");
  Dispatcher::singleton().set_log_sink(
      [](std::string_view l) { std::printf("%.*s\n", int(l.size()), l.data()); });
  Dispatcher::singleton().set_trace_dispatch(true);
  op(x);
  Dispatcher::singleton().set_trace_dispatch(false);
  Dispatcher::singleton().set_log_sink(nullptr);

  step(8, "benchmark: the op (the user's kernel) against the built-in mt::silu on this device");
  Tensor big = randn({1 << 20}).to(dev);
  auto median_ms = [&](auto&& fn) {
    fn();
    if (dev.is_cuda()) cuda::synchronize(dev.index);
    std::vector<double> ms;
    for (int r = 0; r < 11; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      fn();
      if (dev.is_cuda()) cuda::synchronize(dev.index);
      ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(ms.begin(), ms.end());
    return ms[5];
  };
  const double t_op = median_ms([&] { op(big); }), t_builtin = median_ms([&] { silu(big); });
  std::printf(
      "2^20 float32 on %s, median of 11 (wall clock): triton_demo::silu %.3f ms, "
      "mt::silu %.3f ms\n",
      dev.str().c_str(), t_op, t_builtin);

  step(9,
       "train: a two-layer MLP with SiLU is examples/mlp_train (tools/dev.sh demo runs it next)");
  return 0;
}

struct DemoCliOptions {
  std::string device = "cpu";
  bool debug_mode = false;
};

}  // namespace

void add_demo(CLI::App& app, Commands& commands) {
  auto [dem, o] = commands.add<DemoCliOptions>(
      app, "demo", "the tutorial's flow, step by step", [](const DemoCliOptions& opts) {
        return opts.debug_mode ? demo_debug_mode() : demo(opts.device);
      });
  dem->add_option("--device", o->device, "cpu or cuda")->check(device_name());
  dem->add_flag("--debug-mode", o->debug_mode,
                "instead: one MLP training step under mt::DebugMode (every op, its shapes, dtypes "
                "and content hashes) and mt::FlopCounterMode");
}

}  // namespace mt::cli
