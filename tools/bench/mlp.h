// SPDX-License-Identifier: MIT
// ms per training step of examples/mlp.h's two-layer MLP (forward, mse_loss, backward,
// SGD, zero grads): median over steps after warm-up, the device synchronized before
// each clock read. Used by `minitensor bench mlp`.
#pragma once

#include <string>
#include <vector>

#include "examples/mlp.h"
#include "tools/bench/progress.h"

namespace mt::bench {

struct MlpOptions {
  int warmup = 5;  // steps, fewer where they take over max_seconds / 2
  // ... and at least this long: after set-up (the task is drawn with CPU matmuls),
  // OpenBLAS's threads busy-wait for a while, on every core; measured on the GPU host
  // (16 vCPUs), 64/32/64 steps timed in that window took 0.220 ms, 0.138 ms after 0.5 s.
  double min_warmup_seconds = 0.5;
  int steps = 50;           // timed steps, at most
  int min_steps = 3;        // timed steps, at least (even past max_seconds)
  double max_seconds = 10;  // stop timing a shape after this much (slow CPU shapes)
  double lr = 1e-3;
  mlp::Sgd sgd = mlp::Sgd::Foreach;  // the update: one foreach_add_, or a sub_ a parameter
  // BFloat16 or Float16: each step runs under AutocastGuard(device, autocast); Float32: off
  DType autocast = DType::Float32;
  // Set: the timed steps (not the warm-up) run under this dispatch mode (mlp_op_times).
  DispatchMode* timed_under = nullptr;
};

struct MlpRow {
  mlp::Shape shape;
  std::string device;
  int steps;  // timed
  double ms_median, ms_min, ms_max;
  double loss_first, loss_last;  // of the timed steps, to show the step does train
};

MlpRow bench_mlp(const mlp::Shape& shape, Device device, const MlpOptions& opts);

// Where one step's time goes, op by op, without a profiler (the GPU host has no perf): the
// timed steps run under a dispatch mode that times each op call's kernels (inclusive of the
// ops it calls itself; on CUDA the device is synchronized after each op, so the figures are
// each op's own time, not the overlapped step). Rows by op name and input shapes, largest
// first; ms and calls per step.
struct OpTimeRow {
  std::string op, inputs;
  double calls_per_step, ms_per_step;
};
struct OpTimes {
  std::vector<OpTimeRow> rows;
  int steps;
  double step_ms;  // median ms of the same steps under the mode (the mode's own cost in it)
};
OpTimes mlp_op_times(const mlp::Shape& shape, Device device, const MlpOptions& opts);

// The same step eager and through mt::compile, side by side: two models from one seed,
// their steps alternating, each timed on its own (median ms). Also the first call of the
// compiled step (capture, planning, kernels), in a fresh Compiled and in a second one
// (kernels then come from the memory cache), and whether both models end bitwise equal.
struct MlpCompileRow {
  mlp::Shape shape;
  std::string device;
  int steps;
  double eager_ms, compiled_ms;
  double first_call_ms, second_compile_ms;
  size_t nodes, fusion_groups;
  bool bitwise_equal;
  double max_param_diff;
};

MlpCompileRow bench_mlp_compile(const mlp::Shape& shape, Device device, const MlpOptions& opts);

// A user's unfused x * sigmoid(x) through mt::compile (one fused kernel) against the
// built-in mt::silu and the same expression eager (two kernels), float32, 2^lo..2^hi
// elements; median ms (CUDA events, L2 flushed; CPU steady_clock).
struct CompiledSiluRow {
  int log2n;
  double silu_ms, compiled_ms, eager_ms;
  size_t fusion_groups;
  double max_diff;  // compiled against mt::silu
};
std::vector<CompiledSiluRow> bench_compiled_silu(Device device, int lo, int hi);

}  // namespace mt::bench
