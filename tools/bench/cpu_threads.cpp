// SPDX-License-Identifier: MIT
#include "tools/bench/cpu_threads.h"

#include <fmt/format.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <functional>
#include <random>
#include <thread>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/ops/silu/silu.h"
#include "kernels/ops/softmax/softmax.h"
#include "tools/bench/timing.h"

namespace mt::bench {

int usable_cpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1, int(std::thread::hardware_concurrency()));
}

namespace {

struct Op {
  std::string name, shape;
  std::function<void()> call;
};

std::vector<Op> make_ops() {
  const int64_t n = int64_t(1) << 20;
  Tensor x = mul(randn({n}), 3.0), g = randn({n}), y = empty({n}), s = empty({});
  Tensor m = randn({1024, 1024}), mo = empty({1024, 1024}), col = empty({1024});
  Tensor a = randn({512, 512}), b = randn({512, 512}), c = empty({512, 512});
  Tensor xa = randn({512, 256}), w1 = randn({256, 512}), h = empty({512, 512});
  Tensor w2 = randn({512, 256}), o2 = empty({512, 256});
  static const int64_t dim0[] = {0};
  return {
      {"silu", "2^20", [=] { cpu::unary(cpu::UnaryOp::Silu, x, y); }},
      {"silu_backward", "2^20", [=] { cpu::silu_backward(g, x, y); }},
      {"add", "2^20", [=] { cpu::binary(cpu::BinaryOp::Add, x, g, y); }},
      {"exp", "2^20", [=] { cpu::unary(cpu::UnaryOp::Exp, x, y); }},
      {"sum", "2^20", [=] { cpu::sum(x, {}, false, s); }},
      {"sum dim 0", "1024x1024", [=] { cpu::sum(m, dim0, false, col); }},
      {"softmax", "1024x1024", [=] { cpu::softmax(m, 1, mo); }},
      {"matmul", "512x512x512", [=] { cpu::matmul(a, b, c); }},
      {"matmul (MLP fwd)", "512x256 @ 256x512", [=] { cpu::matmul(xa, w1, h); }},
      {"matmul (MLP grad)", "512x512^T @ 512x256", [=] { cpu::matmul(h.t(), o2, w2); }},
  };
}

// A busy loop on every usable core until stopped, or for at most max_seconds.
class BusyLoops {
 public:
  BusyLoops(int n, double max_seconds) {
    const auto until =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(max_seconds);
    for (int i = 0; i < n; ++i)
      threads_.emplace_back([this, until] {
        volatile double v = 1.0;
        while (!stop_.load(std::memory_order_relaxed)) {
          for (int k = 0; k < 100000; ++k) v = v * 1.0000001 + 1e-9;
          if (std::chrono::steady_clock::now() > until) return;
        }
      });
  }
  ~BusyLoops() {
    stop_.store(true);
    for (auto& t : threads_) t.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

}  // namespace

std::vector<std::string> cpu_threads_ops() {
  return {"silu",
          "silu_backward",
          "add",
          "exp",
          "sum",
          "sum dim 0",
          "softmax",
          "matmul",
          "matmul (MLP fwd)",
          "matmul (MLP grad)"};  // make_ops' names, in its order
}

std::vector<CpuThreadsRow> cpu_threads_bench(const CpuThreadsOptions& opts, Progress& progress,
                                             int* busy_loops) {
  const int saved = cpu::num_threads();
  const int multi = opts.threads > 0 ? opts.threads : saved;
  std::vector<Op> ops = make_ops();
  MT_ASSERT(ops.size() == cpu_threads_ops().size(), "cpu_threads_ops() lists {} ops, make_ops() {}",
            cpu_threads_ops().size(), ops.size());
  std::vector<CpuThreadsRow> rows;
  *busy_loops = opts.contended ? usable_cpus() : 0;
  // Bounded: every op's time, twice over, and a minute more.
  const double bound = 60.0 + 2.0 * opts.min_time * double(ops.size()) * 4;
  BusyLoops busy(*busy_loops, bound);
  std::mt19937 rng(20261206);
  std::uniform_int_distribution<int> coin(0, 1);
  for (const Op& op : ops) {
    if (!opts.ops.empty() && std::find(opts.ops.begin(), opts.ops.end(), op.name) == opts.ops.end())
      continue;
    progress.step(op.name);
    // Warm-up at both counts (pages, the pool's threads), then pairs of single calls, one
    // at each count, in a random order: a fixed pattern (1, multi, multi, 1, ...) locks
    // into step with the scheduler's slices on a busy machine, and the calls a slice ends
    // in (descheduled for the rest of the other load's turn) were always of one count.
    for (int t : {1, multi, 1, multi}) {
      cpu::set_num_threads(t);
      op.call();
    }
    std::vector<double> one, many;
    const auto begin = Clock::now();
    while (int(one.size()) < 11 || ms_since(begin) < opts.min_time * 1e3) {
      const bool multi_first = coin(rng) != 0;
      const int order[2] = {multi_first ? multi : 1, multi_first ? 1 : multi};
      for (int t : order) {
        cpu::set_num_threads(t);
        const auto t0 = Clock::now();
        op.call();
        (t == 1 ? one : many).push_back(ms_since(t0));
      }
      if (one.size() >= 100000) break;
    }
    rows.push_back({op.name, op.shape, multi, int(one.size()), median(one), median(many)});
  }
  cpu::set_num_threads(saved);
  return rows;
}

}  // namespace mt::bench
