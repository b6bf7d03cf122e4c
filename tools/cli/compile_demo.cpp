// SPDX-License-Identifier: MIT
// `minitensor compile-demo`: mt::compile on the MLP training step: the graph, Graphviz,
// fusion, replay.
#include <cstdio>
#include <cstring>

#include "tools/bench/timing.h"
#include "tools/cli/cli.h"

namespace mt::cli {
namespace {

// The MLP training step (64/32/64) captured as one graph, printed as text and as Graphviz,
// its fusion groups, and a few steps compiled against eager.
int compile_demo(const std::string& device_name) {
  const Device dev(device_name);
  bench::check_device(dev, "compile-demo");
  auto step = [](const std::vector<Tensor>& in) {
    const Tensor &x = in[0], &y = in[1];
    const std::vector<Tensor> params(in.begin() + 2, in.end());  // w1, b1, w2, b2
    Tensor h = silu(matmul(x, params[0]) + params[1]);
    Tensor loss = mse_loss(matmul(h, params[2]) + params[3], y);
    backward(loss);
    {
      NoGradGuard no_grad;
      for (const Tensor& p : params) sub_(p, p.grad(), 0.01);
    }
    zero_grad(params);
    return std::vector<Tensor>{loss};
  };
  auto make_inputs = [&] {
    manual_seed(0);
    std::vector<Tensor> in = {randn({64, 32}),
                              randn({64, 32}),
                              mul(randn({32, 64}), 0.18),
                              zeros({64}),
                              mul(randn({64, 32}), 0.125),
                              zeros({32})};
    for (size_t i = 0; i < in.size(); ++i) {
      in[i] = in[i].to(dev);
      if (i >= 2) in[i].requires_grad_();
    }
    return in;
  };
  const std::vector<std::string> names = {"x", "y", "w1", "b1", "w2", "b2"};
  std::printf(
      "== 1. capture: the step runs once on fake tensors (shapes from each op's fake kernel,\n"
      "nothing computed); forward, the backward the engine ran and the SGD update are one "
      "graph\n\n");
  const Graph g = capture(step, make_inputs(), {.input_names = names});
  std::printf("%s", g.str().c_str());
  std::printf("\n== 2. the same graph for Graphviz (dot -Tsvg)\n\n%s", g.dot().c_str());
  std::printf("\n== 3. pointwise fusion (on CUDA each group is one generated NVRTC kernel)\n\n");
  for (const FusionGroup& fg : fusion_groups(g)) {
    std::vector<std::string> ops;
    for (int n : fg.nodes) ops.push_back(g.nodes[size_t(n)].op_name());
    std::string body = fg.body;
    for (size_t at = body.find('\n'); at != std::string::npos; at = body.find('\n', at + 3))
      body.replace(at, 1, "\n  ");
    std::printf("%s: %s\n  %s\n", fg.name.c_str(), fmt::format("{}", fmt::join(ops, ", ")).c_str(),
                body.c_str());
  }
  std::printf(
      "\n== 4. five steps, eager and compiled (mt::compile; replay without the dispatcher)\n\n");
  std::vector<Tensor> eager = make_inputs(), compiled_in = make_inputs();
  Compiled compiled = mt::compile(step, {.input_names = names});
  for (int i = 0; i < 5; ++i) {
    const double le = step(eager)[0].item<double>();
    const double lc = compiled(compiled_in)[0].item<double>();
    std::printf("step %d: loss eager %.9g, compiled %.9g\n", i, le, lc);
  }
  bool same = true;
  for (size_t i = 2; i < eager.size(); ++i) {
    Tensor a = eager[i].detach().cpu().contiguous(), b = compiled_in[i].detach().cpu().contiguous();
    same = same && std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0;
  }
  std::printf("parameters after 5 steps: %s\nplan:\n%s",
              same ? "bitwise equal" : "differ (fused kernels round differently)",
              compiled.plan_str().c_str());
  return 0;
}

struct CompileDemoCliOptions {
  std::string device = "cpu";
};

}  // namespace

void add_compile_demo(CLI::App& app, Commands& commands) {
  auto [cdemo, o] = commands.add<CompileDemoCliOptions>(
      app, "compile-demo",
      "mt::compile on the MLP training step: the graph, Graphviz, fusion, replay",
      [](const CompileDemoCliOptions& opts) { return compile_demo(opts.device); });
  cdemo->add_option("--device", o->device, "cpu or cuda")
      ->capture_default_str()
      ->check(device_name());
}

}  // namespace mt::cli
