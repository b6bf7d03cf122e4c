// SPDX-License-Identifier: MIT
// `minitensor memory`: the CUDA caching allocator's events over an MLP training loop.

#include <cstdio>
#include <map>

#include "runtime/cuda/cuda.h"
#include "tools/bench/memory_plot.h"
#include "tools/cli/cli.h"

namespace mt::cli {
namespace {

struct MemoryCliOptions {
  std::string device = "cuda", plot, shape = "256x64x256";
  int steps = 4;
  bool graph = true;
  bool json = false;
};

// Records the caching allocator's history over a few steps of examples/mlp.h's MLP
// (each phase under a MemoryContext), then captures its forward pass in a CUDA graph and
// replays it, empties the cache, and draws the events (docs/memory.md).
int memory_cmd(const MemoryCliOptions& m) {
  Device dev(m.device);
  MT_CHECK(dev.is_cuda(), "[memory] draws the CUDA caching allocator: use --device cuda (got {})",
           dev);
  MT_CHECK(cuda::is_available(), "[memory] needs a GPU, but CUDA is unavailable: {}",
           cuda::unavailable_reason());
  const mlp::Shape shape = *parse_mlp_shape(m.shape);  // checked by CLI11
  cuda::empty_cache(dev.index);
  manual_seed(0);
  mlp::Task task = mlp::teacher_task(shape, dev);
  mlp::Model model = mlp::init(shape, dev);
  cuda::record_memory_history(true, 100000, dev.index);
  NameAllocationsByOp by_op;  // "backward / mt::matmul"
  for (int step = 0; step < m.steps; ++step) {
    Tensor loss;
    {
      cuda::MemoryContext c("forward + loss");
      loss = mse_loss(mlp::forward(model, task.x), task.target);
    }
    {
      cuda::MemoryContext c("backward");
      backward(loss);
    }
    cuda::MemoryContext c("sgd step");
    const std::vector<Tensor> params = model.params();
    NoGradGuard no_grad;
    for (const Tensor& p : params) sub_(p, p.grad(), 0.05);
    zero_grad(params);
  }
  if (m.graph) {
    NoGradGuard no_grad;
    cuda::MemoryContext c("graph: forward");
    cuda::Graph g;
    g.capture_begin(dev.index);
    Tensor y = mlp::forward(model, task.x);
    g.capture_end();
    for (int i = 0; i < 2; ++i) g.replay();
    cuda::synchronize(dev.index);
  }
  cuda::empty_cache(dev.index);
  const std::vector<cuda::MemoryEvent> events = cuda::memory_history(dev.index);
  cuda::record_memory_history(false, 1, dev.index);
  const std::string where = fmt::format("{} ({})", dev.str(), cuda::device_props(dev.index).name);
  if (!m.plot.empty())
    write_plot(
        m.plot,
        bench::svg_memory_timeline(
            events,
            fmt::format("caching allocator on {}: MLP {} x {} steps{}", where, m.shape, m.steps,
                        m.graph ? ", then its forward as a CUDA graph, then empty_cache" : "")));
  std::map<std::string, size_t> counts;
  for (const auto& e : events) ++counts[cuda::memory_event_name(e.kind)];
  if (m.json) {
    Json j = Json::object();
    for (const auto& [k, v] : counts) j[k] = v;
    print_json({{"device", dev.str()}, {"where", where}, {"events", events.size()}, {"counts", j}});
    return 0;
  }
  std::printf("%zu allocator events on %s:", events.size(), where.c_str());
  for (const auto& [k, v] : counts) std::printf(" %s %zu", k.c_str(), v);
  std::printf("\n");
  return 0;
}

}  // namespace

void add_memory(CLI::App& app, Commands& commands) {
  auto [mem, m] = commands.add<MemoryCliOptions>(
      app, "memory",
      "the CUDA caching allocator's events over an MLP training loop (--plot FILE.svg)",
      memory_cmd);
  mem->add_option("--device", m->device, "cuda (cuda:N)")
      ->capture_default_str()
      ->check(device_name());
  mem->add_option("--plot", m->plot, "draw the blocks over time into this SVG file");
  mem->add_option("--shape", m->shape, "the MLP's BATCHxINxHIDDEN")
      ->capture_default_str()
      ->check(CLI::Validator(
          [](std::string& v) {
            return parse_mlp_shape(v) ? std::string()
                                      : "--shape takes BATCHxINxHIDDEN, got " + mt::quoted(v);
          },
          "BATCHxINxHIDDEN"));
  mem->add_option("--steps", m->steps, "training steps recorded")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  mem->add_flag("!--no-graph", m->graph, "leave out the CUDA graph of the forward pass");
  mem->add_flag("--json", m->json, "the event counts as JSON");
}

}  // namespace mt::cli
