// SPDX-License-Identifier: MIT
// CPU fusion, measured side by side in one run: pointwise chains eager, compiled without
// fusion, compiled with fused groups (jit::pointwise's tile evaluator) and compiled as a
// plan decides by default (Note [CPU fusion]'s size threshold), a sum of squares the same
// four ways (fused: one jit::reduction, Note [Reduction fusion]), and the pointwise
// builder's SiLU against the hand-written mt::silu loop, and one function of each family
// tests/test_compile.cpp replays (eager against the default plan). Medians of REPS runs
// each, the forms alternating. Usage: bench_compile_cpu [REPS] [--thread-time] (REPS default 15);
// set MT_NUM_THREADS (or OMP_NUM_THREADS) to fix the thread count. --thread-time times with the
// calling thread's CPU clock instead of the wall clock: with MT_NUM_THREADS=1 every loop runs
// on that thread, and on a shared host the time other processes hold the core is left out.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <vector>

#include "minitensor.h"

using namespace mt;
using Clock = std::chrono::steady_clock;

namespace {

bool g_thread_time = false;  // --thread-time

double thread_ms() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) * 1e3 + double(t.tv_nsec) * 1e-6;
}

double ms_of(const std::function<void()>& f) {
  if (g_thread_time) {
    const double t0 = thread_ms();
    f();
    return thread_ms() - t0;
  }
  const auto t0 = Clock::now();
  f();
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Times each form `reps` times, alternating, after one warm-up call each.
std::vector<double> medians(const std::vector<std::function<void()>>& forms, int reps) {
  std::vector<std::vector<double>> t(forms.size());
  for (const auto& f : forms) f();
  for (int r = 0; r < reps; ++r)
    for (size_t i = 0; i < forms.size(); ++i) t[i].push_back(ms_of(forms[i]));
  std::vector<double> m;
  for (auto& v : t) m.push_back(median(v));
  return m;
}

// y * 1.0001, sigmoid, y * 1.0001, sigmoid, ...: n ops of a memory-bound chain (the float
// sigmoid is a vector loop, eager and fused alike).
std::vector<Tensor> chain(const std::vector<Tensor>& in, int n) {
  Tensor y = in[0];
  for (int i = 0; i < n; ++i) y = i % 2 == 0 ? mt::mul(y, 1.0001) : mt::sigmoid(y);
  return {y};
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::max(3, std::atoi(argv[1])) : 15;
  g_thread_time = argc > 2 && std::strcmp(argv[2], "--thread-time") == 0;
  std::printf("CPU fusion (median of %d runs each, forms alternating; %s)\n\n", reps,
              g_thread_time ? "the calling thread's CPU time" : "wall-clock time");
  std::printf(
      "| function (float32) | eager ms | compiled, unfused ms | compiled, fused ms | "
      "compiled, default ms | eager / default | eager / fused |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (int ops : {4, 16}) {
    for (int log2n : {8, 10, 12, 13, 14, 16, 22, 24}) {
      if (ops == 16 && (log2n < 16 || log2n > 22)) continue;
      Tensor x = randn({int64_t(1) << log2n});
      auto f = [ops](const std::vector<Tensor>& in) { return chain(in, ops); };
      Compiled plain = mt::compile(f, {.fuse = false});
      Compiled fused = mt::compile(f, {.fuse = true});
      Compiled plan = mt::compile(f);
      const int reps_here = log2n >= 20 ? reps : reps * 20;  // small sizes: more, shorter runs
      auto m =
          medians({[&] { f({x}); }, [&] { plain({x}); }, [&] { fused({x}); }, [&] { plan({x}); }},
                  reps_here);
      std::printf("| chain of %d ops, 2^%d | %.4f | %.4f | %.4f | %.4f | %.2fx | %.2fx |\n", ops,
                  log2n, m[0], m[1], m[2], m[3], m[0] / m[3], m[0] / m[2]);
    }
  }
  // Note [Reduction fusion]: the product and the sum as one jit::reduction, against the
  // two calls (eager, and compiled without fusion: the plan before reductions fused).
  std::printf(
      "\n| sum of squares (float32) | eager mt::sum(x * x) ms | compiled, unfused ms | "
      "compiled, fused ms | compiled, default ms | eager / fused | eager / default |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (int log2n : {8, 10, 12, 13, 14, 15, 16, 20, 22, 24}) {
    Tensor x = randn({int64_t(1) << log2n});
    auto f = [](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{mt::sum(in[0] * in[0])};
    };
    Compiled plain = mt::compile(f, {.fuse = false});
    Compiled fused = mt::compile(f, {.fuse = true});
    Compiled plan = mt::compile(f);
    const int reps_here = log2n >= 20 ? reps : reps * 20;
    auto m = medians(
        {[&] { f({x}); }, [&] { plain({x}); }, [&] { fused({x}); }, [&] { plan({x}); }}, reps_here);
    std::printf("| 2^%d | %.4f | %.4f | %.4f | %.4f | %.2fx | %.2fx |\n", log2n, m[0], m[1], m[2],
                m[3], m[0] / m[2], m[0] / m[3]);
  }
  // One function of each family tests/test_compile.cpp replays against eager (an elementwise
  // row of each arity, reductions, matmul, softmax, a loss, views), compiled with the default
  // plan, on [n / 16, 16] float32 inputs: replay's fixed cost against eager's dispatch.
  std::printf(
      "\n| family (float32 [n/16, 16], default plan) | eager us | compiled us | "
      "eager / compiled |\n");
  std::printf("|---|---|---|---|\n");
  using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;
  const std::pair<const char*, Fn> families[] = {
      {"exp(x)", [](const std::vector<Tensor>& in) { return std::vector<Tensor>{mt::exp(in[0])}; }},
      {"x * 1.5",
       [](const std::vector<Tensor>& in) { return std::vector<Tensor>{mt::mul(in[0], 1.5)}; }},
      {"x + y", [](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0] + in[1]}; }},
      {"sum(x)", [](const std::vector<Tensor>& in) { return std::vector<Tensor>{mt::sum(in[0])}; }},
      {"mean(x, 1)",
       [](const std::vector<Tensor>& in) { return std::vector<Tensor>{mt::mean(in[0], {1})}; }},
      {"max(x)", [](const std::vector<Tensor>& in) { return std::vector<Tensor>{mt::max(in[0])}; }},
      {"matmul(x, w)",
       [](const std::vector<Tensor>& in) { return std::vector<Tensor>{mt::matmul(in[0], in[2])}; }},
      {"softmax(x, 1)",
       [](const std::vector<Tensor>& in) { return std::vector<Tensor>{mt::softmax(in[0], 1)}; }},
      {"mse_loss(x, y)",
       [](const std::vector<Tensor>& in) {
         return std::vector<Tensor>{mt::mse_loss(in[0], in[1])};
       }},
      {"views",
       [](const std::vector<Tensor>& in) {
         return std::vector<Tensor>{in[0].transpose(0, 1).contiguous().flatten(),
                                    in[0].slice(1, 1, 5) * 2.0};
       }},
  };
  for (const auto& [name, f] : families) {
    for (int log2n : {8, 10, 12, 16, 20}) {
      const int64_t n = int64_t(1) << log2n;
      const std::vector<Tensor> in = {randn({n / 16, 16}), randn({n / 16, 16}), randn({16, 16})};
      Compiled plan = mt::compile(f);
      const int reps_here = log2n >= 20 ? reps : reps * 20;
      auto m = medians({[&] { f(in); }, [&] { plan(in); }}, reps_here);
      std::printf("| %s, 2^%d | %.3f | %.3f | %.2fx |\n", name, log2n, m[0] * 1e3, m[1] * 1e3,
                  m[0] / m[1]);
    }
  }

  std::printf("\n| SiLU (float32) | mt::silu ms | jit::pointwise ms | pointwise / silu |\n");
  std::printf("|---|---|---|---|\n");
  const jit::Pointwise silu_pw = jit::pointwise("bench_silu", "x / (1.0f + expf(-x))");
  for (int log2n : {16, 22}) {
    Tensor x = randn({int64_t(1) << log2n});
    auto m = medians({[&] { mt::silu(x); }, [&] { silu_pw(x); }}, reps);
    std::printf("| 2^%d | %.4f | %.4f | %.2fx |\n", log2n, m[0], m[1], m[1] / m[0]);
  }
  return 0;
}
