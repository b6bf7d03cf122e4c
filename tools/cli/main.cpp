// SPDX-License-Identifier: MIT
// The minitensor command: doctor, ops, dump, opcheck (tools/cli/opcheck.cpp), demo, bench, memory, cache.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include <unistd.h>

#include "dispatcher/edit_distance.h"
#include "dispatcher/load_library.h"
#include "examples/per_sample.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/jit/cache.h"
#include "kernels/jit/nvrtc.h"
#include "minitensor.h"
#include "runtime/cuda/graph.h"
#include "runtime/cuda/memory.h"
#include "tools/bench/cpu_threads.h"
#include "tools/cli/opcheck.h"
#include "tools/bench/dispatch.h"
#include "tools/bench/graph.h"
#include "tools/bench/host_loop.h"
#include "tools/bench/matmul.h"
#include "tools/bench/memory_plot.h"
#include "tools/bench/mlp.h"
#include "tools/bench/plot.h"
#include "tools/bench/silu.h"
#include "tools/bench/table.h"

using namespace mt;

namespace {

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown";
}

// Every --json output is built as a value and printed by nlohmann::json, which escapes
// control characters; bytes that are not UTF-8 (a path, say) become U+FFFD. Keys keep
// the order they were added in. NaN and infinities (a variant that could not run) print
// as null.
using Json = nlohmann::ordered_json;
void print_json(const Json& j) {
  std::printf("%s\n", j.dump(-1, ' ', false, Json::error_handler_t::replace).c_str());
}

// ---- doctor ----------------------------------------------------------------------------

// Each line of doctor: a stable identifier (the --json key), the label the table shows, the value.
struct DoctorLine {
  std::string key, label, value;
};

int doctor(bool json) {
  std::vector<DoctorLine> kv;
  kv.push_back({"version", "version", MT_VERSION});
  kv.push_back({"compiler", "compiler", __VERSION__});
#ifdef MT_HAVE_CUDA
  kv.push_back({"cuda_backend", "cuda backend", "built (driver and NVRTC loaded at run time)"});
#elif defined(MT_CUDA_DISABLED)
  kv.push_back({"cuda_backend", "cuda backend", "not built (configured with -Dcuda=disabled)"});
#else
  kv.push_back({"cuda_backend", "cuda backend", "not built (no cuda.h/nvrtc.h at configure time)"});
#endif
  kv.push_back({"cpu", "cpu", fmt::format("{} ({} hardware threads)", cpu_model(), std::thread::hardware_concurrency())});
  kv.push_back({"blas", "blas", cpu::blas_info()});
  kv.push_back({"cpu_threads", "cpu threads", std::to_string(cpu::num_threads())});
  bool cuda_ok = cuda::is_available();
  kv.push_back({"cuda_driver", "cuda driver",
                cuda_ok ? fmt::format("found, {} device(s), driver {}", cuda::device_count(), cuda::driver_version())
                        : "unavailable: " + cuda::unavailable_reason()});
  for (int i = 0; cuda_ok && i < cuda::device_count(); ++i) {
    const auto& p = cuda::device_props(i);
    kv.push_back({fmt::format("cuda_{}", i), fmt::format("cuda:{}", i),
                  fmt::format("{}, sm_{}{}, {} SMs, {:.1f} GiB", p.name, p.major, p.minor, p.sm_count,
                              double(p.total_memory) / (1 << 30))});
  }
  if (jit::nvrtc_available()) {
    jit::NvrtcVersion v = jit::nvrtc_version();
    std::vector<std::string> archs;
    for (int a : jit::nvrtc_supported_archs()) archs.push_back(fmt::format("sm_{}", a));
    kv.push_back({"nvrtc", "nvrtc",
                  fmt::format("{}.{} at {}; archs {}", v.major, v.minor, jit::nvrtc_library_path(), fmt::join(archs, " "))});
  } else {
    kv.push_back({"nvrtc", "nvrtc", "unavailable: " + jit::nvrtc_unavailable_reason()});
  }
  try {
    auto& cache = jit::kernel_cache();
    kv.push_back({"kernel_cache", "kernel cache", cache.disk_enabled()
                                        ? fmt::format("{} ({} entries, {:.1f} MiB of {} MiB)", cache.config().dir, cache.list().size(),
                                                      double(cache.disk_bytes()) / (1 << 20), cache.config().max_bytes >> 20)
                                        : std::string("memory only (MT_KERNEL_CACHE=0)")});
  } catch (const Error& e) {
    kv.push_back({"kernel_cache", "kernel cache", std::string("error: ") + e.what()});
  }
  // A tiny SiLU on every device, checked against the CPU.
  Tensor x = linspace(-4, 4, 33);
  Tensor ref = silu(x);
  kv.push_back({"silu_cpu", "silu on cpu", "ok"});
  bool all_ok = true;
  for (int i = 0; cuda_ok && i < cuda::device_count(); ++i) {
    try {
      double d = max_abs_diff(silu(x.to(Device(DeviceType::CUDA, i))).cpu(), ref);
      kv.push_back({fmt::format("silu_cuda_{}", i), fmt::format("silu on cuda:{}", i),
                    fmt::format("max |diff| vs cpu {:.2g}: {}", d, d < 1e-5 ? "ok" : "MISMATCH")});
      all_ok = all_ok && d < 1e-5;
    } catch (const Error& e) {
      kv.push_back({fmt::format("silu_cuda_{}", i), fmt::format("silu on cuda:{}", i), std::string("error: ") + e.what()});
      all_ok = false;
    }
  }
  if (json) {
    Json j = Json::object();
    for (const DoctorLine& l : kv) j[l.key] = l.value;
    print_json(j);
  } else {
    for (const DoctorLine& l : kv) std::printf("%-14s %s\n", l.label.c_str(), l.value.c_str());
  }
  return all_ok ? 0 : 1;
}

// ---- ops, dump --------------------------------------------------------------------------

int list_ops(const std::string& ns, bool json) {
  auto ops = dispatcher().all_ops();
  Json out = Json::array();
  for (const OperatorName& n : ops) {
    if (!ns.empty() && n.ns != ns) continue;
    auto h = dispatcher().find_or_throw(n.str());
    const DispatchTable& t = h.entry()->table();
    std::vector<std::string> keys;
    for (int k = 0; k < kNumDispatchKeys; ++k)
      if (t.origin[size_t(k)] == 1) keys.emplace_back(dispatch_key_name(DispatchKey(k)));
    const TagSet tags = h.entry()->tags();
    if (json) {
      std::vector<std::string> tag_names;
      for (std::string_view t : tags.names()) tag_names.emplace_back(t);
      out.push_back({{"name", n.str()}, {"schema", h.schema().str()}, {"kernels", keys}, {"tags", tag_names}});
    } else {
      std::printf("%-60s [%s]%s\n", h.schema().str().c_str(), fmt::format("{}", fmt::join(keys, ", ")).c_str(),
                  tags.empty() ? "" : (" tags: " + tags.str()).c_str());
    }
  }
  if (json) print_json(out);
  return 0;
}

// The tutorial's op, as the demo and `dump triton_demo::silu` show it: a CPU kernel of
// plain loops and, for CUDA tensors, the user's own GPU kernel as a pointwise expression.
const jit::Pointwise& demo_silu_gpu() {
  static const jit::Pointwise f = jit::pointwise("triton_demo_silu", "x / (1.0f + expf(-x))");
  return f;
}

auto make_demo_op() {
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

// The registered op closest to `name` ("silu" and "mt::sillu" give "mt::silu"), or "" when
// none is close: compared whole, and by the part after "::" alone; a tie goes to mt::.
std::string closest_op(std::string_view name) {
  const size_t colon = name.rfind("::");
  const std::string_view bare = colon == std::string_view::npos ? name : name.substr(colon + 2);
  const size_t most = std::max<size_t>(2, bare.size() / 4);
  std::string best;
  size_t best_d = most + 1;
  bool best_mt = false;
  for (const OperatorName& n : dispatcher().all_ops()) {
    const std::string full = n.str();
    std::string short_name = n.name;
    if (!n.overload.empty()) short_name += "." + n.overload;
    const size_t d = std::min(detail::edit_distance(name, full), detail::edit_distance(bare, short_name));
    const bool is_mt = n.ns == "mt";
    if (d < best_d || (d == best_d && is_mt && !best_mt)) best = full, best_d = d, best_mt = is_mt;
  }
  return best;
}

int dump(const std::string& name) {
  std::optional<decltype(make_demo_op())> demo;
  if (name == "triton_demo::silu") demo.emplace(make_demo_op());
  std::string text;
  try {
    text = dispatcher().dump(name) + "\n" + dispatcher().dump_table(name);
  } catch (const Error&) {
    const std::string guess = closest_op(name);
    if (guess.empty()) throw;
    MT_ERROR("[dump] no operator named {} is registered; did you mean '{}'? (`minitensor ops` "
             "lists them)",
             mt::quoted(name), guess);
  }
  std::printf("%s", text.c_str());
  return 0;
}

// ---- explain ---------------------------------------------------------------------------

// `minitensor explain 'ns::op' --args cpu:grad 2.5 ...`: why a call of the op with such
// arguments runs the kernel it runs (dispatcher/explain.h). An argument is a float32
// tensor of 2 elements, `cpu`, `cuda` or `fake`, with `:grad` to require grad; or a number.
// --include / --exclude add thread-local keys as a guard would.
int explain(const std::string& name, const std::vector<std::string>& args,
            const std::vector<std::string>& include, const std::vector<std::string>& exclude) {
  OperatorHandle op = dispatcher().find_or_throw(name);
  Stack stack;
  for (const std::string& a : args) {
    const size_t colon = a.find(':');
    const std::string base = a.substr(0, colon);
    const std::string flag = colon == std::string::npos ? "" : a.substr(colon + 1);
    MT_CHECK(flag.empty() || flag == "grad",
             "[explain] argument {}: the only suffix is ':grad' (requires grad); e.g. cpu:grad",
             mt::quoted(a));
    Tensor t;
    if (base == "cpu") {
      t = zeros({2});
    } else if (base == "fake") {
      t = fake_empty({2});
    } else if (base == "cuda") {
      MT_CHECK(cuda::is_available(), "[explain] argument 'cuda' needs a GPU, but CUDA is unavailable: {}",
               cuda::unavailable_reason());
      t = zeros({2}, {.device = Device("cuda:0")});
    } else {
      char* end = nullptr;
      const double d = std::strtod(a.c_str(), &end);
      MT_CHECK(!a.empty() && end == a.c_str() + a.size(),
               "[explain] argument {} is not cpu, cuda, fake (each with an optional :grad) or a "
               "number",
               mt::quoted(a));
      if (a.find_first_of(".eE") == std::string::npos) stack.emplace_back(int64_t(d));
      else stack.emplace_back(d);
      continue;
    }
    if (flag == "grad") t.requires_grad_();
    stack.emplace_back(t);
  }
  auto keys = [](const std::vector<std::string>& names, const char* what) {
    DispatchKeySet ks;
    for (const std::string& n : names) {
      DispatchKey k;
      MT_CHECK(parse_dispatch_key(n, &k) && dispatch_key_name(k) != "?",
               "[explain] {} {} is not a dispatch key; the keys are Trace, Autograd, Mode, Fake, "
               "CUDA, CPU",
               what, mt::quoted(n));
      ks = ks.add(k);
    }
    return ks;
  };
  IncludeDispatchKeyGuard inc(keys(include, "--include"));
  ExcludeDispatchKeyGuard exc(keys(exclude, "--exclude"));
  std::printf("%s", explain_dispatch(op, stack).str().c_str());
  return 0;
}

// ---- demo ------------------------------------------------------------------------------

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
  std::printf("== DebugMode: one MLP step (64/32/64), one line an op; #hash: FNV-1a of the values\n");
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
  step(1, "register: custom_op(\"triton_demo::silu\", fn) defines the op, fn is its CPU kernel; "
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
  std::printf("tape:\n%s", autograd::dump_tape().c_str());
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
  Dispatcher::singleton().set_log_sink([](std::string_view l) { std::printf("%.*s\n", int(l.size()), l.data()); });
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
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(ms.begin(), ms.end());
    return ms[5];
  };
  const double t_op = median_ms([&] { op(big); }), t_builtin = median_ms([&] { silu(big); });
  std::printf("2^20 float32 on %s, median of 11 (wall clock): triton_demo::silu %.3f ms, "
              "mt::silu %.3f ms\n",
              dev.str().c_str(), t_op, t_builtin);

  step(9, "train: a two-layer MLP with SiLU is examples/mlp_train (tools/dev.sh demo runs it next)");
  return 0;
}

// ---- compile-demo ----------------------------------------------------------------------

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
    std::vector<Tensor> in = {randn({64, 32}), randn({64, 32}), mul(randn({32, 64}), 0.18),
                              zeros({64}), mul(randn({64, 32}), 0.125), zeros({32})};
    for (size_t i = 0; i < in.size(); ++i) {
      in[i] = in[i].to(dev);
      if (i >= 2) in[i].requires_grad_();
    }
    return in;
  };
  const std::vector<std::string> names = {"x", "y", "w1", "b1", "w2", "b2"};
  std::printf("== 1. capture: the step runs once on fake tensors (shapes from each op's fake kernel,\n"
              "nothing computed); forward, the backward the engine ran and the SGD update are one graph\n\n");
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
  std::printf("\n== 4. five steps, eager and compiled (mt::compile; replay without the dispatcher)\n\n");
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
  std::printf("parameters after 5 steps: %s\nplan:\n%s", same ? "bitwise equal" : "differ (fused kernels round differently)",
              compiled.plan_str().c_str());
  return 0;
}

// ---- bench dispatch ----------------------------------------------------------------------

// What every bench subcommand takes: --json (JSON on stdout instead of the table) and
// --plot FILE.svg.
struct BenchOutput {
  bool json = false;
  std::string plot;
};

void write_plot(const std::string& path, const std::string& svg_text) {
  bench::write_text_file(path, svg_text);
  std::fprintf(stderr, "wrote %s\n", path.c_str());
}

// --self-check ROUNDS: each row timed against itself in two forms: the pairs of
// `bench_libtorch --interleaved` (kPairs pairs of short loops, the median of the pairs' ratios)
// and 5 loops a side, alternating loop by loop, their medians compared (each side timed as
// `bench dispatch` times a row, without the separate-process comparison's process boundary).
// Both sides run the same code, so every ratio should be 1: the spread is what the form
// cannot resolve on this machine in its present state.
// --only keeps one row, --json prints the ranges as JSON (keyed by the rows' keys).
int bench_dispatch_self_check(const bench::DispatchRows& dispatch_rows, int64_t iters, int rounds,
                              const std::string& only, bool json) {
  const std::string pairs = fmt::format("{} pairs of ~{} ms", bench::kPairs, bench::kPairLoopMs);
  if (!json) {
    std::printf("each row against itself, %d rounds, on %s: the range of the ratios\n", rounds,
                cpu_model().c_str());
    std::printf("  %-58s %20s   %-20s\n", "", "5 loops a side", pairs.c_str());
  }
  Json rows = Json::object();
  for (const bench::DispatchRow& r : dispatch_rows.rows()) {
    if (!only.empty() && only != r.key) continue;
    double lo[2] = {INFINITY, INFINITY}, hi[2] = {0, 0};
    for (int k = 0; k < rounds; ++k) {
      std::vector<double> a, b;
      for (int l = 0; l < 5; ++l) {
        a.push_back(bench::loop_ns(r.call, iters / r.divisor));
        b.push_back(bench::loop_ns(r.call, iters / r.divisor));
      }
      double ratio[2] = {bench::median(b) / bench::median(a),
                         bench::ns_per_call_paired(r.call, r.call, bench::kPairs, bench::kPairLoopMs,
                                                     k % 2 == 0).ratio};
      for (int f = 0; f < 2; ++f) lo[f] = std::min(lo[f], ratio[f]), hi[f] = std::max(hi[f], ratio[f]);
    }
    if (json)
      rows[r.key] = {{"loops_min", lo[0]}, {"loops_max", hi[0]}, {"pairs_min", lo[1]}, {"pairs_max", hi[1]}};
    else
      std::printf("  %-58s %8.3f to %-8.3f %8.3f to %-8.3f\n", r.label, lo[0], hi[0], lo[1], hi[1]);
  }
  if (json)
    print_json({{"bench", "dispatch --self-check"}, {"cpu", cpu_model()}, {"rounds", rounds},
                {"loops_a_side", 5}, {"pairs", bench::kPairs}, {"pair_loop_ms", bench::kPairLoopMs},
                {"rows", rows}});
  return 0;
}

int bench_dispatch(const BenchOutput& o, int64_t iters, const std::string& only, int self_check) {
  bench::DispatchRows dispatch_rows;  // tools/bench/dispatch.cpp, shared with bench_libtorch
  if (self_check > 0) return bench_dispatch_self_check(dispatch_rows, iters, self_check, only, o.json);
  // A no-op row's loop makes `iters` calls, silu's and add's iters / 20. --only ROW times
  // that row alone (the others print nan), so that an instruction count of the whole
  // process under callgrind is that row's.
  struct Row { const char* key; const char* name; double ns; };
  std::vector<Row> rows;
  for (const bench::DispatchRow& r : dispatch_rows.rows()) {
    bool wanted = only.empty() || only == r.key;
    rows.push_back({r.key, r.label, wanted ? bench::ns_per_call(r.call, iters / r.divisor) : std::nan("")});
  }
  double t_direct = rows[0].ns;
  if (!o.plot.empty()) {
    bench::BarPlot plot{.title = fmt::format("dispatch cost, ns per call (median of 5 runs), {}", cpu_model()),
                        .value_label = "ns per call"};
    for (const Row& r : rows) plot.bars.push_back({r.name, r.ns});
    write_plot(o.plot, bench::svg(plot));
  }
  if (o.json) {
    Json j = Json::object();
    for (const Row& r : rows) j[r.key] = std::round(r.ns * 100) / 100;  // bench_libtorch's keys
    print_json(j);
    return 0;
  }
  std::printf("dispatch cost, ns per call (median of 5 runs), on %s\n", cpu_model().c_str());
  for (const Row& r : rows)
    std::printf("  %-58s %8.1f ns   (%+.1f ns vs direct)\n", r.name, r.ns, r.ns - t_direct);
  return 0;
}

// ---- bench silu, matmul, mlp ---------------------------------------------------------------

struct SweepOptions {
  std::string device = "cpu";
  int min_log2 = -1, max_log2 = -1;  // -1: the benchmark's default for the device
  std::vector<int> threads;          // CPU; empty: the kernels' default thread count
  double min_time = 0.25;            // CPU: seconds of repeats per figure, at least
  int repeats = 50, warmup = 5;      // CUDA
  std::string dtype = "float32";     // CUDA SiLU
};

Device bench_device(const std::string& name, std::string_view what) {
  Device d(name);
  bench::check_device(d, what);
  return d;
}

std::vector<int> thread_counts(const SweepOptions& s) {
  return s.threads.empty() ? std::vector<int>{cpu::num_threads()} : s.threads;
}

int bench_silu(const SweepOptions& s, const BenchOutput& o) {
  Device dev = bench_device(s.device, "bench silu");
  const int lo = s.min_log2 >= 0 ? s.min_log2 : 12;
  const int hi = s.max_log2 >= 0 ? s.max_log2 : dev.is_cuda() ? 28 : 24;
  MT_CHECK(lo <= hi && hi <= 32, "[bench silu] need --min-log2 <= --max-log2 <= 32, got {} and {}", lo, hi);
  const int sizes = (hi - lo) / 2 + 1;
  bench::LinePlot plot{.title = "", .x_label = "elements (float32)", .y_label = "time per call (us)"};
  std::vector<std::vector<std::string>> table;
  Json json_rows = Json::array();
  if (dev.is_cpu()) {
    const auto threads = thread_counts(s);
    std::vector<bench::SiluCpuRow> rows;
    {
      bench::Progress progress("bench silu", sizes * int(threads.size()));
      rows = bench::silu_cpu_sweep(lo, hi, threads, progress, s.min_time);
    }
    plot.title = fmt::format("SiLU float32 on the CPU ({}), median time per call", cpu_model());
    int color = 0;
    for (int t : threads)
      for (const char* op : {"silu_fwd", "silu_bwd"}) {
        bench::Series v{.name = fmt::format("{} {}T", op, t), .color = color};
        bench::Series c{.name = fmt::format("copy floor {} {}T", op, t), .reference = true, .color = color++};
        for (const auto& r : rows)
          if (r.op == op && r.threads == t) {
            v.x.push_back(double(r.n)), v.y.push_back(r.seconds * 1e6);
            c.x.push_back(double(r.n)), c.y.push_back(r.copy_seconds * 1e6);
          }
        plot.series.push_back(std::move(v));
        plot.series.push_back(std::move(c));
      }
    for (size_t i = 0; i < rows.size(); ++i) {
      const auto& r = rows[i];
      table.push_back({r.op, fmt::format("{}", r.threads), fmt::format("2^{}", std::countr_zero(uint64_t(r.n))),
                       fmt::format("{:.2f}", r.seconds * 1e6), fmt::format("{:.2f}", r.gbps),
                       fmt::format("{:.2f}", r.copy_seconds * 1e6), fmt::format("{:.2f}", r.copy_gbps),
                       fmt::format("{:.0f}%", 100 * r.gbps / r.copy_gbps)});
      json_rows.push_back({{"op", r.op}, {"threads", r.threads}, {"n", r.n}, {"us", r.seconds * 1e6}, {"gbps", r.gbps},
                           {"copy_us", r.copy_seconds * 1e6}, {"copy_gbps", r.copy_gbps}});
    }
    if (o.json) {
      print_json({{"bench", "silu"}, {"device", "cpu"}, {"cpu", cpu_model()}, {"rows", json_rows}});
    } else {
      std::printf("SiLU float32 on the CPU (%s): median time per call against a memcpy moving the same bytes\n",
                  cpu_model().c_str());
      bench::print_table({"op", "threads", "n", "us", "GB/s", "copy_us", "copy_GB/s", "of_copy"}, table);
    }
  } else {
    DType t = DType::Float32;
    if (s.dtype == "bfloat16") t = DType::BFloat16;
    else MT_CHECK(s.dtype == "float32", "[bench silu] --dtype must be float32 or bfloat16, got {}", s.dtype);
    bench::CudaTiming timing{.warmup = s.warmup, .repeats = s.repeats};
    std::vector<bench::SiluCudaRow> rows;
    {
      bench::Progress progress("bench silu", sizes);
      rows = bench::silu_cuda_sweep(dev.index, {t}, lo, hi, timing, progress);
    }
    const std::string gpu = cuda::device_props(dev.index).name;
    plot.title = fmt::format("SiLU {} on {} ({}), median of {} (events, L2 flushed)", s.dtype, dev.str(), gpu, s.repeats);
    plot.x_label = fmt::format("elements ({})", s.dtype);
    int color = 0;
    for (const char* pass : {"fwd", "bwd"}) {
      bench::Series v{.name = fmt::format("silu {}", pass), .color = color};
      bench::Series u{.name = fmt::format("unfused {}", pass), .color = color + 2};
      bench::Series c{.name = fmt::format("copy floor {}", pass), .reference = true, .color = color++};
      for (const auto& r : rows)
        if (r.pass == pass) {
          double n = std::ldexp(1.0, r.log2n);
          v.x.push_back(n), v.y.push_back(r.ms * 1e3);
          u.x.push_back(n), u.y.push_back(r.unfused_ms * 1e3);
          c.x.push_back(n), c.y.push_back(r.copy_ms * 1e3);
        }
      plot.series.push_back(std::move(v));
      plot.series.push_back(std::move(u));
      plot.series.push_back(std::move(c));
    }
    for (size_t i = 0; i < rows.size(); ++i) {
      const auto& r = rows[i];
      table.push_back({r.dtype, r.pass, fmt::format("2^{}", r.log2n), fmt::format("{:.4f}", r.ms), fmt::format("{:.0f}", r.gbps),
                       fmt::format("{:.1f}%", r.pct_copy), fmt::format("{:.4f}", r.copy_ms), fmt::format("{:.4f}", r.unfused_ms),
                       fmt::format("{:.2f}x", r.speedup)});
      json_rows.push_back({{"dtype", r.dtype}, {"pass", r.pass}, {"log2n", r.log2n}, {"ms", r.ms}, {"gbps", r.gbps},
                           {"pct_copy", r.pct_copy}, {"copy_ms", r.copy_ms}, {"unfused_ms", r.unfused_ms},
                           {"speedup_unfused", r.speedup}});
    }
    if (o.json) {
      print_json({{"bench", "silu"}, {"device", dev.str()}, {"gpu", gpu}, {"rows", json_rows}});
    } else {
      std::printf("SiLU %s on %s (%s): median of %d runs (events, L2 flushed), against a device copy of the same bytes\n",
                  s.dtype.c_str(), dev.str().c_str(), gpu.c_str(), s.repeats);
      bench::print_table({"dtype", "pass", "n", "ms", "GB/s", "of_copy", "copy_ms", "unfused_ms", "vs_unfused"}, table);
    }
  }
  if (!o.plot.empty()) write_plot(o.plot, bench::svg(plot));
  return 0;
}

int bench_matmul(const SweepOptions& s, const BenchOutput& o) {
  Device dev = bench_device(s.device, "bench matmul");
  const int lo = s.min_log2 >= 0 ? s.min_log2 : 6;
  const int hi = s.max_log2 >= 0 ? s.max_log2 : dev.is_cuda() ? 13 : 10;
  MT_CHECK(lo <= hi && hi <= 15, "[bench matmul] need --min-log2 <= --max-log2 <= 15, got {} and {}", lo, hi);
  std::vector<int64_t> sizes;
  for (int lg = lo; lg <= hi; ++lg) sizes.push_back(int64_t(1) << lg);
  std::vector<bench::MatmulRow> rows;
  std::string where;
  if (dev.is_cpu()) {
    const auto threads = thread_counts(s);
    bench::Progress progress("bench matmul", int(sizes.size() * threads.size()) * (cpu::have_blas() ? 2 : 1));
    rows = bench::matmul_cpu_sweep(sizes, threads, true, progress, s.min_time);
    where = fmt::format("the CPU ({})", cpu_model());
  } else {
    bench::Progress progress("bench matmul", int(sizes.size()));
    rows = bench::matmul_cuda_sweep(dev.index, sizes, {.warmup = s.warmup, .repeats = s.repeats}, progress);
    where = fmt::format("{} ({})", dev.str(), cuda::device_props(dev.index).name);
  }
  bench::LinePlot plot{.title = fmt::format("matmul float32, n x n @ n x n, on {}", where), .x_label = "n",
                       .y_label = "time per call (ms)"};
  std::vector<std::string> variants;
  for (const auto& r : rows) {
    std::string v = r.threads ? fmt::format("{} {}T", r.path, r.threads) : r.path;
    if (std::find(variants.begin(), variants.end(), v) == variants.end()) variants.push_back(v);
  }
  for (const std::string& v : variants) {
    bench::Series sr{.name = v};
    for (const auto& r : rows)
      if ((r.threads ? fmt::format("{} {}T", r.path, r.threads) : r.path) == v)
        sr.x.push_back(double(r.size)), sr.y.push_back(r.seconds * 1e3);
    plot.series.push_back(std::move(sr));
  }
  // The copy floor, from the first variant's measurements (one copy per size is enough).
  bench::Series floor{.name = "copy floor (A, B, C bytes)", .reference = true};
  for (const auto& r : rows)
    if ((r.threads ? fmt::format("{} {}T", r.path, r.threads) : r.path) == variants.front())
      floor.x.push_back(double(r.size)), floor.y.push_back(r.copy_seconds * 1e3);
  plot.series.push_back(std::move(floor));
  if (!o.plot.empty()) write_plot(o.plot, bench::svg(plot));
  if (o.json) {
    Json json_rows = Json::array();
    for (const auto& r : rows)
      json_rows.push_back({{"size", r.size}, {"path", r.path}, {"threads", r.threads}, {"ms", r.seconds * 1e3},
                           {"gflops", r.gflops}, {"copy_ms", r.copy_seconds * 1e3}});
    print_json({{"bench", "matmul"}, {"device", dev.str()}, {"where", where}, {"rows", json_rows}});
    return 0;
  }
  std::printf("matmul float32 (n x n @ n x n) on %s: median time per call, and a copy of the bytes it must move\n",
              where.c_str());
  std::vector<std::vector<std::string>> table;
  for (const auto& r : rows)
    table.push_back({fmt::format("{}", r.size), r.path, r.threads ? fmt::format("{}", r.threads) : "-",
                     fmt::format("{:.3f}", r.seconds * 1e3), fmt::format("{:.1f}", r.gflops),
                     fmt::format("{:.3f}", r.copy_seconds * 1e3)});
  bench::print_table({"n", "path", "threads", "ms", "GFLOP/s", "copy_floor_ms"}, table);
  return 0;
}

struct MlpCliOptions {
  std::string device = "cpu";
  std::vector<std::string> shapes = {"64x32x64", "4096x1024x4096"};
  bench::MlpOptions opts;
  int warmup = -1, steps = -1;  // -1: 5 and 50
  bool compile = false;         // eager and mt::compile side by side
};

// BATCHxINxHIDDEN with each size in 1..2^31-1 and no matrix over 2^31 elements; nullopt
// for anything else (out-of-range numbers too: from_chars does not saturate).
std::optional<mlp::Shape> parse_mlp_shape(std::string_view text) {
  int64_t dims[3];
  const char* p = text.data();
  const char* end = text.data() + text.size();
  for (int k = 0; k < 3; ++k) {
    if (k > 0 && (p == end || *p++ != 'x')) return std::nullopt;
    auto [next, ec] = std::from_chars(p, end, dims[k]);
    if (ec != std::errc() || next == p || dims[k] < 1 || dims[k] >= (int64_t(1) << 31)) return std::nullopt;
    p = next;
  }
  if (p != end) return std::nullopt;
  const int64_t cap = int64_t(1) << 31;
  if (dims[0] * dims[1] > cap || dims[0] * dims[2] > cap || dims[1] * dims[2] > cap) return std::nullopt;
  return mlp::Shape{.batch = dims[0], .in = dims[1], .hidden = dims[2], .out = dims[1]};  // output dim = input dim
}

// bench mlp --compile: the eager step and the same step through mt::compile, alternating.
int bench_mlp_compile_cmd(const MlpCliOptions& m, const bench::MlpOptions& opts, const BenchOutput& o) {
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
  const std::string where = dev.is_cuda() ? fmt::format("{} ({})", dev.str(), cuda::device_props(dev.index).name)
                                          : fmt::format("cpu ({}, {} threads)", cpu_model(), cpu::num_threads());
  auto label = [](const mlp::Shape& s) { return fmt::format("{}/{}/{}", s.batch, s.in, s.hidden); };
  // The user's x * sigmoid(x), compiled into one kernel, against mt::silu.
  const int lo = dev.is_cuda() ? 20 : 16, hi = dev.is_cuda() ? 26 : 18;
  const std::vector<bench::CompiledSiluRow> silu_rows = bench::bench_compiled_silu(dev, lo, hi);
  if (!o.plot.empty()) {
    bench::BarPlot plot{.title = fmt::format("MLP training step, eager and through mt::compile, on {}", where),
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
      silu_json.push_back({{"log2n", r.log2n}, {"silu_ms", r.silu_ms}, {"compiled_ms", r.compiled_ms},
                           {"eager_ms", r.eager_ms}, {"fusion_groups", r.fusion_groups}, {"max_diff", r.max_diff}});
    Json json_rows = Json::array();
    for (const auto& r : rows)
      json_rows.push_back({{"batch", r.shape.batch}, {"in", r.shape.in}, {"hidden", r.shape.hidden},
                           {"steps", r.steps}, {"eager_ms", r.eager_ms}, {"compiled_ms", r.compiled_ms},
                           {"speedup", r.eager_ms / r.compiled_ms}, {"first_call_ms", r.first_call_ms},
                           {"second_compile_ms", r.second_compile_ms}, {"nodes", r.nodes},
                           {"fusion_groups", r.fusion_groups}, {"bitwise_equal", r.bitwise_equal},
                           {"max_param_diff", r.max_param_diff}});
    print_json({{"bench", "mlp --compile"}, {"device", dev.str()}, {"where", where}, {"lr", opts.lr},
                {"rows", json_rows}, {"silu", silu_json}});
    return 0;
  }
  std::printf("examples/mlp.h's training step, eager and through mt::compile (steps alternating, each\n"
              "timed alone; median ms per step after warm-up), on %s\n",
              where.c_str());
  std::vector<std::vector<std::string>> table;
  for (const auto& r : rows)
    table.push_back({label(r.shape), fmt::format("{}", r.steps), fmt::format("{:.4f}", r.eager_ms),
                     fmt::format("{:.4f}", r.compiled_ms), fmt::format("{:.2f}x", r.eager_ms / r.compiled_ms),
                     fmt::format("{:.1f}", r.first_call_ms), fmt::format("{:.1f}", r.second_compile_ms),
                     fmt::format("{}/{}", r.nodes, r.fusion_groups),
                     r.bitwise_equal ? "bitwise" : fmt::format("max diff {:.2g}", r.max_param_diff)});
  bench::print_table({"batch/in/hidden", "steps", "eager ms", "compiled ms", "speedup", "1st call ms",
                      "2nd compile ms", "nodes/fused", "params vs eager"},
                     table);
  std::printf("\na user's unfused x * sigmoid(x) through mt::compile, against mt::silu and the same\n"
              "expression eager (float32; median ms)\n");
  std::vector<std::vector<std::string>> silu_table;
  for (const auto& r : silu_rows)
    silu_table.push_back({fmt::format("2^{}", r.log2n), fmt::format("{:.4f}", r.silu_ms),
                          fmt::format("{:.4f}", r.compiled_ms), fmt::format("{:.3f}", r.compiled_ms / r.silu_ms),
                          fmt::format("{:.4f}", r.eager_ms), fmt::format("{}", r.fusion_groups),
                          fmt::format("{:.2g}", r.max_diff)});
  bench::print_table({"n", "mt::silu ms", "compiled ms", "compiled/silu", "eager x*sigmoid(x) ms",
                      "fused groups", "max diff"},
                     silu_table);
  return 0;
}

int bench_mlp_cmd(const MlpCliOptions& m, const BenchOutput& o) {
  Device dev = bench_device(m.device, "bench mlp");
  std::vector<mlp::Shape> shapes;
  for (const std::string& s : m.shapes) shapes.push_back(*parse_mlp_shape(s));  // checked by CLI11
  bench::MlpOptions opts = m.opts;
  if (m.warmup >= 0) opts.warmup = m.warmup;
  if (m.steps >= 0) opts.steps = m.steps;
  if (m.compile) return bench_mlp_compile_cmd(m, opts, o);
  std::vector<bench::MlpRow> rows;
  {
    bench::Progress progress("bench mlp", int(shapes.size()));
    for (const mlp::Shape& sh : shapes) {
      progress.step(fmt::format("{}x{}x{} on {}", sh.batch, sh.in, sh.hidden, dev.str()));
      rows.push_back(bench::bench_mlp(sh, dev, opts));
    }
  }
  const std::string where = dev.is_cuda() ? fmt::format("{} ({})", dev.str(), cuda::device_props(dev.index).name)
                                          : fmt::format("cpu ({}, {} threads)", cpu_model(), cpu::num_threads());
  auto label = [](const mlp::Shape& s) { return fmt::format("{}/{}/{}", s.batch, s.in, s.hidden); };
  if (!o.plot.empty()) {
    bench::BarPlot plot{.title = fmt::format("MLP training step (forward, MSE, backward, SGD) on {}", where),
                        .value_label = "ms per step (median)"};
    for (const auto& r : rows) plot.bars.push_back({"batch/in/hidden " + label(r.shape), r.ms_median});
    write_plot(o.plot, bench::svg(plot));
  }
  if (o.json) {
    Json json_rows = Json::array();
    for (const auto& r : rows)
      json_rows.push_back({{"batch", r.shape.batch}, {"in", r.shape.in}, {"hidden", r.shape.hidden}, {"out", r.shape.out},
                           {"steps", r.steps}, {"ms_median", r.ms_median}, {"ms_min", r.ms_min}, {"ms_max", r.ms_max},
                           {"loss_first", r.loss_first}, {"loss_last", r.loss_last}});
    print_json({{"bench", "mlp"}, {"sgd", opts.sgd == mlp::Sgd::Foreach ? "foreach" : "loop"}, {"device", dev.str()}, {"where", where}, {"lr", opts.lr}, {"rows", json_rows}});
    return 0;
  }
  std::printf("two-layer MLP with SiLU (output dim = in), one SGD training step: forward, mse_loss, backward,\n"
              "update under NoGradGuard (%s), zero grads; median ms per step after warm-up, on %s\n",
              opts.sgd == mlp::Sgd::Foreach ? "one foreach_add_" : "a sub_ a parameter", where.c_str());
  std::vector<std::vector<std::string>> table;
  for (const auto& r : rows)
    table.push_back({label(r.shape), fmt::format("{}", r.shape.out), fmt::format("{}", r.steps),
                     fmt::format("{:.3f}", r.ms_median), fmt::format("{:.3f}", r.ms_min), fmt::format("{:.3f}", r.ms_max),
                     fmt::format("{:.4g} -> {:.4g}", r.loss_first, r.loss_last)});
  bench::print_table({"batch/in/hidden", "out", "steps", "ms/step", "min", "max", "loss (timed steps)"}, table);
  return 0;
}

// ---- bench cpu ---------------------------------------------------------------------------

// Each CPU op on one thread and on several, alternating, optionally beside a busy loop on
// every core (docs/cpu.md, "Threads").
int bench_cpu_cmd(const bench::CpuThreadsOptions& c, const BenchOutput& o) {
  std::vector<bench::CpuThreadsRow> rows;
  int busy = 0;
  {
    bench::Progress progress("bench cpu", c.ops.empty() ? int(bench::cpu_threads_ops().size()) : int(c.ops.size()));
    rows = bench::cpu_threads_bench(c, progress, &busy);
  }
  const std::string where = fmt::format("{}, {} usable CPUs", cpu_model(), bench::usable_cpus());
  double worst = 0;
  for (const auto& r : rows) worst = std::max(worst, r.multi_ms / r.single_ms);
  if (o.json) {
    Json json_rows = Json::array();
    for (const auto& r : rows)
      json_rows.push_back({{"op", r.op}, {"shape", r.shape}, {"threads", r.threads}, {"samples", r.samples},
                           {"single_ms", r.single_ms}, {"multi_ms", r.multi_ms}, {"ratio", r.multi_ms / r.single_ms}});
    print_json({{"bench", "cpu"}, {"where", where}, {"contended", c.contended}, {"busy_loops", busy},
                {"worst_ratio", worst}, {"rows", json_rows}});
    return 0;
  }
  std::printf("CPU ops on 1 thread and on %d, single calls alternating, median ms, on %s%s\n",
              rows.empty() ? cpu::num_threads() : rows[0].threads, where.c_str(),
              c.contended ? fmt::format("; a busy loop on each of the {} CPUs beside it", busy).c_str() : "");
  std::vector<std::vector<std::string>> table;
  for (const auto& r : rows)
    table.push_back({r.op, r.shape, fmt::format("{}", r.samples), fmt::format("{:.4f}", r.single_ms),
                     fmt::format("{:.4f}", r.multi_ms), fmt::format("{:.2f}", r.multi_ms / r.single_ms)});
  bench::print_table({"op", "shape", "calls", "1 thread ms", fmt::format("{} threads ms", rows.empty() ? 0 : rows[0].threads),
                      "ratio"},
                     table);
  std::printf("ratio = multi-thread time / single-thread time (< 1: the threads help)%s\n",
              c.contended ? fmt::format("; worst {:.2f} (goal: at most 1.5)", worst).c_str() : "");
  return 0;
}

// ---- bench vmap --------------------------------------------------------------------------

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
  once(run_vmap);  // warm-up (and the CUDA kernels' first compile)
  once(run_loop);
  std::vector<double> tv, tl;
  for (int r = 0; r < v.repeats; ++r) {
    tv.push_back(once(run_vmap));
    tl.push_back(once(run_loop));
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
    (void)mt::vmap([&](const std::vector<Tensor>& a) { return std::vector<Tensor>{rowsum(a[0])}; })({rows});
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
  const double mv = bench::median(tv), ml = bench::median(tl), mf = bench::median(tf), mr = bench::median(tr);
  const std::string where =
      dev.is_cuda() ? fmt::format("{} ({})", dev.str(), cuda::device_props(dev.index).name) : cpu_model();
  if (!o.plot.empty()) {
    bench::BarPlot plot{.title = fmt::format("per-sample gradients, 64/32/64 MLP, batch 64, on {}", where),
                        .value_label = "ms (median)"};
    plot.bars.push_back({"vmap(grad)", mv});
    plot.bars.push_back({"loop of 64 grad calls", ml});
    plot.bars.push_back({"an op without a rule under vmap (the fallback)", mf});
    plot.bars.push_back({"the loop it replaces", mr});
    write_plot(o.plot, bench::svg(plot));
  }
  if (o.json) {
    print_json({{"bench", "vmap"}, {"device", dev.str()}, {"where", where}, {"repeats", v.repeats},
                {"vmap_ms", mv}, {"loop_ms", ml}, {"loop_over_vmap", ml / mv},
                {"fallback_ms", mf}, {"rows_loop_ms", mr}, {"fallback_over_loop", mf / mr}});
    return 0;
  }
  std::printf("per-sample gradients of the 64/32/64 MLP at batch 64 on %s, median of %d (alternating)\n",
              where.c_str(), v.repeats);
  std::printf("  vmap(grad)              %9.3f ms\n", mv);
  std::printf("  loop of 64 grad calls   %9.3f ms\n", ml);
  std::printf("  loop / vmap             %9.2fx\n", ml / mv);
  std::printf("an op without a batching rule (a row sum of [64, 256, 64]) under vmap, against the loop it replaces\n");
  std::printf("  the fallback            %9.3f ms\n", mf);
  std::printf("  64 calls, copied        %9.3f ms\n", mr);
  std::printf("  fallback / loop         %9.2fx   (goal: at most 1.05)\n", mf / mr);
  return 0;
}

// ---- bench split -------------------------------------------------------------------------

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
  const std::vector<Tensor> inputs = {mt::randn({b, w}).to(dev), mt::mul(mt::randn({w, w}), s).to(dev),
                                      mt::mul(mt::randn({w, w}), s).to(dev),
                                      mt::mul(mt::randn({w, w}), s).to(dev)};
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
  if (had_log) ::setenv("MT_LOG", saved_log.c_str(), 1);
  else ::unsetenv("MT_LOG");
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
    split_line = fmt::format("graph split: yes, {} CUDA graphs with the cudagraph_unsafe op called eagerly "
                             "between them (compile log: \"{}\")",
                             parts, captured);
  else if (!no_graph.empty())
    split_line = fmt::format("graph split: no, no CUDA graph was captured (compile log: \"{}\")", no_graph);
  else if (dev.is_cpu() && !would.empty())
    split_line = fmt::format("graph split: no, the CPU replays no CUDA graph; the plan calls the "
                             "cudagraph_unsafe op eagerly (compile log: \"{}\")",
                             would);
  else
    split_line = "graph split: no, the compile log does not say the graph was split";
  auto once = [&](auto&& fn) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < sp.calls; ++i) fn();
    if (dev.is_cuda()) cuda::synchronize(dev.index);
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / sp.calls;
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
      dev.is_cuda() ? fmt::format("{} ({})", dev.str(), cuda::device_props(dev.index).name) : cpu_model();
  const std::string shape = fmt::format("batch {}, width {}", b, w);
  if (!o.plot.empty()) {
    bench::BarPlot plot{.title = fmt::format("a step with a cudagraph_unsafe op, {}, on {}", shape, where),
                        .value_label = "ms per step (median)"};
    plot.bars.push_back({"eager", me});
    plot.bars.push_back({split ? "compiled (graph split in two)" : "compiled", mc});
    write_plot(o.plot, bench::svg(plot));
  }
  if (o.json) {
    print_json({{"bench", "split"}, {"device", dev.str()}, {"where", where}, {"batch", b}, {"width", w},
                {"repeats", sp.repeats}, {"calls", sp.calls}, {"eager_ms", me}, {"compiled_ms", mc},
                {"eager_over_compiled", me / mc}, {"split", split}, {"graph_parts", parts},
                {"max_abs_diff", max_diff}, {"split_line", split_line}});
    return 0;
  }
  std::printf("3 matmuls, 5 pointwise ops and bench_split::scale (tagged cudagraph_unsafe) in the "
              "middle, %s, on %s;\nms per step, median of %d samples of %d calls (alternating)\n",
              shape.c_str(), where.c_str(), sp.repeats, sp.calls);
  std::printf("  eager                   %9.4f ms\n", me);
  std::printf("  mt::compile             %9.4f ms\n", mc);
  std::printf("  eager / compiled        %9.2fx   (above 1: the compiled step is faster)\n", me / mc);
  std::printf("  max |compiled - eager|  %9.2g\n", max_diff);
  std::printf("%s\n", split_line.c_str());
  return 0;
}

// ---- bench graph -------------------------------------------------------------------------

struct GraphCliOptions {
  std::string device = "cuda";
  int kernels = 1000, elements = 4096, repeats = 21;
};

int bench_graph_cmd(const GraphCliOptions& g, const BenchOutput& o) {
  Device dev = bench_device(g.device, "bench graph");
  const bench::GraphBenchResult r = bench::bench_graph(dev, g.kernels, g.elements, g.repeats);
  const std::string where = fmt::format("{} ({})", dev.str(), cuda::device_props(dev.index).name);
  const double ratio = r.eager_us / r.graph_us;
  if (!o.plot.empty()) {
    bench::BarPlot plot{.title = fmt::format("silu on {} float32, {} back to back, on {}",
                                             r.elements, r.kernels, where),
                        .value_label = "us a kernel (median)"};
    plot.bars.push_back({"eager: mt::silu called N times", r.eager_us});
    plot.bars.push_back({"one CUDA graph of the same N kernels", r.graph_us});
    write_plot(o.plot, bench::svg(plot));
  }
  if (o.json) {
    print_json({{"bench", "graph"},
                {"device", dev.str()},
                {"where", where},
                {"kernels", r.kernels},
                {"elements", r.elements},
                {"eager_us", r.eager_us},
                {"graph_us", r.graph_us},
                {"eager_over_graph", ratio},
                {"graph_nodes", r.graph_nodes},
                {"pool_bytes", r.pool_bytes}});
    return 0;
  }
  std::printf(
      "a tiny kernel (silu on %d float32) %d times back to back on %s: wall clock a kernel, median "
      "of %d\n"
      "loops, each ending in a synchronize\n",
      r.elements, r.kernels, where.c_str(), g.repeats);
  bench::print_table(
      {"path", "us a kernel"},
      {{"eager: mt::silu called N times", fmt::format("{:.3f}", r.eager_us)},
       {fmt::format("one CUDA graph of the same N kernels ({} nodes, pool {} B), replayed",
                    r.graph_nodes, r.pool_bytes),
        fmt::format("{:.3f}", r.graph_us)}});
  std::printf("eager / graph: %.2fx\n", ratio);
  return 0;
}

// ---- memory ----------------------------------------------------------------------------

struct MemoryCliOptions {
  std::string device = "cuda", plot, shape = "256x64x256";
  int steps = 4;
  bool graph = true;
};

// Records the caching allocator's history over a few steps of examples/mlp.h's MLP
// (each phase under a MemoryContext), then captures its forward pass in a CUDA graph and
// replays it, empties the cache, and draws the events (docs/memory.md).
int memory_cmd(const MemoryCliOptions& m, bool json) {
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
  if (json) {
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

// ---- cache -----------------------------------------------------------------------------

int cache_cmd(const std::string& what, bool json) {
  auto& cache = jit::kernel_cache();
  const std::string& dir = cache.config().dir;
  if (what == "clear") {
    MT_CHECK(cache.disk_enabled(), "[cache] there is no disk cache to clear (MT_KERNEL_CACHE=0)");
    std::error_code ec;
    if (!std::filesystem::exists(std::filesystem::symlink_status(dir, ec))) {  // nothing cached yet
      if (json)
        print_json({{"cleared", dir}, {"existed", false}});
      else
        std::printf("nothing to clear: %s does not exist yet\n", mt::quoted(dir).c_str());
      return 0;
    }
    cache.clear();  // throws, with the reason, when it cannot
    if (json)
      print_json({{"cleared", dir}, {"existed", true}});
    else
      std::printf("cleared %s\n", dir.c_str());
    return 0;
  }
  const auto entries = cache.list();
  if (what == "stats") {
    const size_t invalid = size_t(std::count_if(entries.begin(), entries.end(), [](const auto& e) { return !e.valid; }));
    if (json) {
      print_json({{"dir", dir}, {"entries", entries.size()}, {"invalid", invalid}, {"bytes", cache.disk_bytes()},
                  {"max_bytes", cache.config().max_bytes}});
    } else {
      std::printf("dir %s\nentries %zu (%zu invalid), %.2f MiB of %llu MiB\n", dir.c_str(), entries.size(), invalid,
                  double(cache.disk_bytes()) / (1 << 20), (unsigned long long)(cache.config().max_bytes >> 20));
    }
    return 0;
  }
  // Most recently used first, with the disk hits that events.log recorded for each entry
  // (loads by any process since the log began; Note [Kernel cache history]).
  std::map<std::string, uint64_t> hits;
  for (const auto& ev : cache.disk_log())
    if (ev.kind == jit::CacheEvent::Kind::DiskHit) ++hits[ev.key];
  if (json) {
    Json out = Json::array();
    for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
      const auto& e = *it;
      out.push_back({{"key", e.key},
                     {"name", e.name},
                     {"target", e.target},
                     {"arch", e.arch},
                     {"path", e.path},
                     {"bytes", e.size_bytes},
                     {"age_s", e.age_s},
                     {"disk_hits", hits[e.key]},
                     {"valid", e.valid},
                     {"problem", e.problem}});
    }
    print_json(out);
    return 0;
  }
  if (!entries.empty())
    std::printf("%-16s  %-12s %-10s %10s  %9s  %5s  %s\n", "key", "name", "target", "bytes",
                "last use", "hits", "state");
  for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
    const auto& e = *it;
    std::printf("%s  %-12s %-10s %8llu B  %7.0f s  %5llu  %s\n", e.key.substr(0, 16).c_str(),
                mt::quoted(e.name).c_str(), e.target.c_str(), (unsigned long long)e.size_bytes,
                e.age_s, (unsigned long long)hits[e.key], e.valid ? "ok" : e.problem.c_str());
  }
  return 0;
}

// `cache --plot FILE.svg`: the LRU order over time, from this directory's events.log, or
// (--demo) from a small workload in a fresh temporary directory bounded to about three
// entries: five kernels accessed A B C A D B E A B C D E, each access after dropping the
// in-memory copies, so that every access is a disk hit or a compile.
int cache_plot(const std::string& path, bool demo) {
  std::vector<jit::CacheEvent> events;
  std::string title;
  if (demo) {
    MT_CHECK(jit::nvrtc_available(), "[cache --plot --demo] needs NVRTC: {}",
             jit::nvrtc_unavailable_reason());
    std::string dir = "/tmp/mt-cache-demo-XXXXXX";
    MT_CHECK(::mkdtemp(dir.data()),
             "[cache --plot --demo] cannot make a temporary directory in /tmp: {}",
             std::strerror(errno));
    const auto archs = jit::nvrtc_supported_archs();
    const int arch = std::count(archs.begin(), archs.end(), 80) ? 80 : archs.front();
    auto request = [arch](char k) {
      jit::CompileRequest r;
      r.name = fmt::format("lru_{}.cu", k);
      r.source = fmt::format(
          "template <typename T>\n__global__ void lru_{0}(T* p) {{ p[threadIdx.x] = T({1}); }}\n",
          k, int(k));
      r.name_expressions = {fmt::format("lru_{}<float>", k)};
      r.arch = arch;
      return r;
    };
    try {
      jit::KernelCache cache({.dir = dir});
      cache.record_history(true);
      const std::string pattern = "ABCADBEABCDE";
      for (size_t i = 0; i < pattern.size(); ++i) {
        cache.clear_memory();
        cache.get(request(pattern[i]));
        if (i == 0) {  // room for three entries of about this size
          const uint64_t entry = cache.disk_bytes();
          cache.set_max_bytes(3 * entry + entry / 2);
        }
      }
      events = cache.history();
      cache.clear();
      ::rmdir(dir.c_str());
    } catch (...) {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
      throw;
    }
    title = fmt::format("kernel cache, LRU on disk: five kernels, room for three, accessed {}",
                        "A B C A D B E A B C D E");
  } else {
    auto& cache = jit::kernel_cache();
    MT_CHECK(cache.disk_enabled(),
             "[cache --plot] there is no disk cache to draw (MT_KERNEL_CACHE=0); try --demo");
    events = cache.disk_log();
    MT_CHECK(!events.empty(),
             "[cache --plot] {} has no events.log yet: run something that compiles kernels, or try "
             "--demo",
             cache.config().dir);
    title = fmt::format("kernel cache {}, LRU on disk", cache.config().dir);
  }
  write_plot(path, bench::svg_cache_lru(events, title));
  size_t hits = 0, misses = 0, evictions = 0;
  for (const auto& e : events) {
    hits += e.kind == jit::CacheEvent::Kind::DiskHit;
    misses += e.kind == jit::CacheEvent::Kind::Compile;
    evictions += e.kind == jit::CacheEvent::Kind::Eviction;
  }
  std::printf("%zu disk hits, %zu misses (compiled), %zu evictions\n", hits, misses, evictions);
  return 0;
}

// The thread counts that can help on this machine: more are clamped, with a warning.
int machine_threads() { return std::max(1, int(std::thread::hardware_concurrency())); }

int clamp_threads(int n, const char* what) {
  const int most = machine_threads();
  if (n <= most) return n;
  std::fprintf(stderr, "minitensor: %s %d is more than this machine's %d hardware threads; using %d\n", what, n, most,
               most);
  return most;
}

// OMP_NUM_THREADS=100000 would start that many threads per parallel region.
void bound_omp_threads() {
  const char* v = std::getenv("OMP_NUM_THREADS");
  if (!v || !*v) return;
  std::string_view text(v);
  text = text.substr(0, text.find(','));  // a list gives the outermost level first
  long long n = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec == std::errc::result_out_of_range || (ec == std::errc() && n > machine_threads()))
    cpu::set_num_threads(clamp_threads(ec == std::errc() ? int(std::min<long long>(n, 1 << 30)) : 1 << 30,
                                       "OMP_NUM_THREADS"));
}

// The subcommands a position takes, for "unknown command" messages (CLI11 says only
// that the argument was not expected).
int unknown_command(const CLI::App& app, const std::vector<std::string>& args) {
  const CLI::App* at = &app;
  std::string path = "minitensor";
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") break;
    if (a.starts_with("-")) {
      if (a == "--plot" || a == "--namespace" || a == "--device" || a == "--load") ++i;  // takes a value
      continue;
    }
    if (at->get_subcommands({}).empty()) break;  // a positional argument of a leaf
    const CLI::App* sub = nullptr;
    try {
      sub = at->get_subcommand(a);
    } catch (const CLI::OptionNotFound&) {
    }
    if (!sub) {
      std::vector<std::string> names;
      for (const CLI::App* s : at->get_subcommands({})) names.push_back(s->get_name());
      std::fprintf(stderr, "%s: unknown command %s; the commands are %s (see %s --help)\n", path.c_str(),
                   mt::quoted(a).c_str(), fmt::format("{}", fmt::join(names, ", ")).c_str(), path.c_str());
      return 2;
    }
    at = sub;
    path += " " + a;
  }
  return 0;
}

}  // namespace

// --device: a usage error (exit 2) when it does not parse, as the help's exit codes promise.
const CLI::Validator kDeviceName(
    [](std::string& v) -> std::string {
      try {
        Device d(v);
        (void)d;
        return "";
      } catch (const Error& e) {
        return e.what();
      }
    },
    "");

int main(int argc, char** argv) {
  // --load LIB.so may come before or after the command (up to a "--"): taken out here, so
  // that no command's parser sees it.
  std::vector<std::string> load_first;
  std::vector<char*> kept_args{argv[0]};
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--") {
      kept_args.insert(kept_args.end(), argv + i, argv + argc);
      break;
    }
    if (a == "--load") {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "minitensor: --load needs the path of a shared library of ops, "
                             "e.g. minitensor --load ./libmyops.so ops\n");
        return 2;
      }
      load_first.emplace_back(argv[++i]);
    } else if (a.starts_with("--load=")) {
      load_first.emplace_back(a.substr(7));
    } else {
      kept_args.push_back(argv[i]);
    }
  }
  argc = int(kept_args.size());
  kept_args.push_back(nullptr);
  argv = kept_args.data();
  CLI::App app{"minitensor: a small tensor runtime with its own op dispatcher"};
  app.require_subcommand(1);
  app.set_version_flag("-V,--version", std::string("minitensor ") + MT_VERSION);
  app.footer(
      "Exit codes: 0 success; 1 an error (the message says why) or a failed check (doctor);\n"
      "2 a usage error (an unknown command or option, a bad value).");
  std::vector<std::string> load;
  app.add_option("--load", load,
                 "load a shared library of ops first (its MT_LIBRARY blocks register), e.g. "
                 "minitensor --load ./libmyops.so ops; before or after the command; repeatable")
      ->type_name("LIB.so");
  bool json = false;
  auto* doc = app.add_subcommand("doctor", "the build, the CPU, CUDA, NVRTC, the kernel cache, a SiLU check");
  doc->add_flag("--json", json, "machine-readable output");
  std::string ns;
  auto* ops = app.add_subcommand("ops", "every registered op with its schema and kernels");
  ops->add_option("--namespace", ns, "only this namespace");
  ops->add_flag("--json", json, "machine-readable output");
  std::string name;
  auto* dmp = app.add_subcommand("dump", "an op's registrations and computed dispatch table");
  dmp->add_option("name", name, "namespace::op")->required();
  std::string device = "cpu";
  auto* opc = app.add_subcommand(
      "opcheck", "opcheck (every test, test_compile included) and gradcheck on an op, e.g. one of --load's");
  std::string opcheck_op;
  std::vector<std::string> opcheck_samples;
  opc->add_option("op", opcheck_op, "the op, e.g. myops::scale")->required();
  opc->add_option("--sample", opcheck_samples,
                  "one sample's arguments, e.g. 'randn(3,4), 2.0' (float64 tensors; randn(3):float32, "
                  "numbers, true/false, none, [1,2]); repeatable; default: each tensor randn [3, 4] "
                  "then [5], each float 1.5, int 2, bool true");
  auto* dem = app.add_subcommand("demo", "the tutorial's flow, step by step");
  dem->add_option("--device", device, "cpu or cuda")->check(kDeviceName);
  bool debug_mode = false;
  dem->add_flag("--debug-mode", debug_mode,
                "instead: one MLP training step under mt::DebugMode (every op, its shapes, dtypes "
                "and content hashes) and mt::FlopCounterMode");
  std::string explain_name;
  std::vector<std::string> explain_args, explain_include, explain_exclude;
  auto* exp_cmd = app.add_subcommand(
      "explain", "why a call of an op runs the kernel it runs (each argument's keys, the "
                 "thread-local sets, the table's entries)");
  exp_cmd->add_option("name", explain_name, "namespace::op")->required();
  exp_cmd->add_option("--args", explain_args,
                      "the call's arguments: cpu, cuda or fake (a float32 tensor of 2 elements; "
                      "add :grad to require grad) or a number")
      ->type_name("ARG ...");
  exp_cmd->add_option("--include", explain_include, "thread-local included keys, as a guard adds")
      ->type_name("KEY ...");
  exp_cmd->add_option("--exclude", explain_exclude, "thread-local excluded keys (--exclude Autograd: no_grad)")
      ->type_name("KEY ...");
  // bench: each benchmark is a subcommand; --json and --plot may come before or after it.
  BenchOutput bench_out;
  auto* ben = app.add_subcommand(
      "bench", "benchmarks: dispatch, silu, matmul, mlp, graph, cpu, vmap, split (a table; --json, --plot)");
  ben->require_subcommand(1);
  ben->add_flag("--json", bench_out.json, "print JSON on stdout instead of the table");
  ben->add_option("--plot", bench_out.plot, "also draw the results into this SVG file");
  auto* b_dispatch = ben->add_subcommand("dispatch", "ns per call through the dispatcher, against a direct call");
  int64_t dispatch_iters = 2000000;
  b_dispatch
      ->add_option("--iters", dispatch_iters,
                   "calls in each timed loop of the no-op rows (silu and add: a 20th); fewer for "
                   "valgrind --tool=callgrind (docs/host-cost.md)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t(20), int64_t(1) << 40));
  std::string dispatch_only;
  int dispatch_self_check = 0;
  b_dispatch
      ->add_option("--self-check", dispatch_self_check,
                   "time each row against itself for this many rounds, as 5 loops a side "
                   "and as the pairs of bench_libtorch --interleaved, and print the ratios' "
                   "ranges: what each form can resolve on this machine")
      ->check(CLI::Range(1, 1000));
  b_dispatch
      ->add_option("--only", dispatch_only,
                   "time one row only (for callgrind's counts): direct, dispatch (or cpu), "
                   "autograd_redispatch (or autograd), boxed, silu_grad (or silu), add")
      // The rows' keys (tools/bench/dispatch.cpp), and the short names they had before.
      ->transform(CLI::CheckedTransformer(std::map<std::string, std::string>{
                                              {"direct", "direct"}, {"cpu", "dispatch"},
                                              {"dispatch", "dispatch"}, {"autograd", "autograd_redispatch"},
                                              {"autograd_redispatch", "autograd_redispatch"}, {"boxed", "boxed"},
                                              {"silu", "silu_grad"}, {"silu_grad", "silu_grad"}, {"add", "add"}})
                      .description(""))
      ->type_name("ROW");
  // The options several bench subcommands share: --device (checked as a device name) and
  // --repeats (the timed samples whose median is shown).
  auto add_device = [&](CLI::App* sub, std::string& device, const char* help) {
    sub->add_option("--device", device, help)->capture_default_str()->check(kDeviceName);
  };
  auto add_repeats = [&](CLI::App* sub, int& repeats, const char* help) {
    sub->add_option("--repeats", repeats, help)->capture_default_str()->check(CLI::Range(1, 100000));
  };
  SweepOptions silu_o, matmul_o;
  auto* b_silu = ben->add_subcommand("silu", "SiLU forward and fused backward over sizes, against a copy of the same bytes");
  auto* b_matmul = ben->add_subcommand("matmul", "square float32 matmul over sizes: time, GFLOP/s, copy floor");
  for (auto [sub, o] : {std::pair{b_silu, &silu_o}, std::pair{b_matmul, &matmul_o}}) {
    add_device(sub, o->device, "cpu or cuda (cuda:N)");
    const int most_log2 = sub == b_silu ? 32 : 15;
    sub->add_option("--min-log2", o->min_log2, "smallest size, as a power of two (silu 12, matmul 6)")
        ->check(CLI::Range(0, most_log2));
    sub->add_option("--max-log2", o->max_log2, "largest size, as a power of two (silu: cpu 24, cuda 28; matmul: cpu 10, cuda 13)")
        ->check(CLI::Range(0, most_log2));
    sub->add_option("--threads", o->threads,
                    "CPU: thread counts to run, e.g. --threads 1,2 (default: the kernels' count; at most the machine's)")
        ->delimiter(',')
        ->check(CLI::Range(1, 1 << 20));
    sub->add_option("--min-time", o->min_time, "CPU: seconds of repeats per figure, at least")
        ->capture_default_str()
        ->check(CLI::Range(1e-6, 3600.0));
    sub->add_option("--repeats", o->repeats, "CUDA: timed runs per figure (median)")
        ->capture_default_str()
        ->check(CLI::Range(1, 1000000));
    sub->add_option("--warmup", o->warmup, "CUDA: untimed runs first")->capture_default_str()->check(CLI::Range(0, 1000000));
  }
  b_silu->add_option("--dtype", silu_o.dtype, "CUDA: float32 or bfloat16 (the CPU runs float32)")->capture_default_str();
  MlpCliOptions mlp_o;
  auto* b_mlp = ben->add_subcommand("mlp", "ms per training step of examples/mlp.h's two-layer MLP (64/32/64, 4096/1024/4096)");
  add_device(b_mlp, mlp_o.device, "cpu or cuda (cuda:N)");
  b_mlp->add_option("--sgd", mlp_o.opts.sgd,
                    "the update: foreach (one mt::foreach_add_ over all parameters) or loop (one "
                    "mt::sub_ a parameter)")
      ->transform(CLI::CheckedTransformer(
                      std::map<std::string, mlp::Sgd>{{"foreach", mlp::Sgd::Foreach}, {"loop", mlp::Sgd::Loop}})
                      .description(""))  // CLI11 would show {foreach->0,loop->1}
      ->type_name("foreach|loop")
      ->default_str("foreach");
  b_mlp->add_option("--shape", mlp_o.shapes, "BATCHxINxHIDDEN, repeatable (output dim = IN)")
      ->capture_default_str()
      ->check(CLI::Validator(
          [](std::string& v) {
            return parse_mlp_shape(v) ? std::string()
                                      : "--shape takes BATCHxINxHIDDEN (e.g. 64x32x64), each from 1 to 2^31 - 1 and no "
                                        "product of two over 2^31, got " + mt::quoted(v);
          },
          "BATCHxINxHIDDEN"));
  b_mlp->add_option("--steps", mlp_o.steps, "timed steps, at most (default 50; fewer past --max-seconds)")
      ->check(CLI::Range(1, 1000000));
  b_mlp->add_option("--warmup", mlp_o.warmup, "untimed steps first (default 5)")->check(CLI::Range(0, 1000000));
  b_mlp->add_option("--max-seconds", mlp_o.opts.max_seconds, "per shape: stop timing after this long (3 timed steps at least)")
      ->capture_default_str()
      ->check(CLI::Range(1e-3, 86400.0));
  GraphCliOptions graph_o;
  auto* b_graph = ben->add_subcommand(
      "graph", "a tiny kernel back to back: eager launches against one CUDA graph replay");
  add_device(b_graph, graph_o.device, "cuda (cuda:N)");
  b_graph->add_option("--kernels", graph_o.kernels, "launches per timed loop")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  b_graph->add_option("--elements", graph_o.elements, "float32 elements per kernel")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 28));
  add_repeats(b_graph, graph_o.repeats, "timed loops (median)");
  bench::CpuThreadsOptions cpu_o;
  auto* b_cpu = ben->add_subcommand(
      "cpu", "each CPU op on 1 thread and on several, side by side (--contended: beside a busy loop on every core)");
  b_cpu->add_flag("--contended", cpu_o.contended,
                  "run a busy loop on every usable core while timing (stopped at the end, bounded in time)");
  b_cpu->add_option("--threads", cpu_o.threads, "the multi-thread count (default: the kernels' count)")
      ->check(CLI::Range(1, 1024));
  b_cpu->add_option("--min-time", cpu_o.min_time, "seconds of alternating calls per op, at least")
      ->capture_default_str()
      ->check(CLI::Range(1e-3, 3600.0));
  b_cpu->add_option("--op", cpu_o.ops, "time only this op (repeatable)")->check(CLI::IsMember(bench::cpu_threads_ops()));
  b_cpu->fallthrough();
  b_mlp->add_flag("--compile", mlp_o.compile,
                  "the step eager and through mt::compile side by side (speedup, first-call time, same parameters)");
  VmapCliOptions vmap_o;
  auto* b_vmap = ben->add_subcommand(
      "vmap", "per-sample gradients of the 64/32/64 MLP at batch 64: vmap(grad) against a loop of 64 grad calls");
  add_device(b_vmap, vmap_o.device, "cpu or cuda (cuda:N)");
  add_repeats(b_vmap, vmap_o.repeats, "timed runs of each (median)");
  SplitCliOptions split_o;
  auto* b_split = ben->add_subcommand(
      "split", "a step with a cudagraph_unsafe op in the middle: eager against mt::compile (on CUDA, a "
               "graph split in two), and whether it was split");
  add_device(b_split, split_o.device, "cpu or cuda (cuda:N)");
  add_repeats(b_split, split_o.repeats, "timed samples of each (median)");
  b_split->add_option("--calls", split_o.calls, "calls in each sample")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  b_split->add_option("--batch", split_o.batch, "rows of the input")->capture_default_str()->check(CLI::Range(1, 1 << 20));
  b_split->add_option("--width", split_o.width, "the layers' width")->capture_default_str()->check(CLI::Range(1, 1 << 14));
  for (auto* sub : {b_dispatch, b_silu, b_matmul, b_mlp, b_graph, b_vmap, b_split}) sub->fallthrough();
  auto* aut = app.add_subcommand("autocast", "the autocast policy of each op (lower_precision, float32, promote)");
  std::string compile_device = "cpu";
  auto* cdemo = app.add_subcommand("compile-demo", "mt::compile on the MLP training step: the graph, Graphviz, fusion, replay");
  cdemo->add_option("--device", compile_device, "cpu or cuda")->capture_default_str()->check(kDeviceName);
  std::string cache_what = "ls", cache_plot_path;
  bool cache_demo = false;
  auto* cac = app.add_subcommand(
      "cache", "the NVRTC kernel cache: ls (most recent first, with hits), stats, clear, --plot");
  cac->add_option("what", cache_what, "ls | stats | clear")->check(CLI::IsMember({"ls", "stats", "clear"}));
  cac->add_flag("--json", json, "machine-readable output");
  cac->add_option("--plot", cache_plot_path,
                  "draw the LRU order over time (hits, misses, evictions) into this SVG file");
  cac->add_flag("--demo", cache_demo,
                "with --plot: a small workload in a temporary directory, not this cache's log");
  MemoryCliOptions mem_o;
  auto* mem = app.add_subcommand(
      "memory", "the CUDA caching allocator's events over an MLP training loop (--plot FILE.svg)");
  mem->add_option("--device", mem_o.device, "cuda (cuda:N)")->capture_default_str()->check(kDeviceName);
  mem->add_option("--plot", mem_o.plot, "draw the blocks over time into this SVG file");
  mem->add_option("--shape", mem_o.shape, "the MLP's BATCHxINxHIDDEN")
      ->capture_default_str()
      ->check(CLI::Validator(
          [](std::string& v) {
            return parse_mlp_shape(v) ? std::string()
                                      : "--shape takes BATCHxINxHIDDEN, got " + mt::quoted(v);
          },
          "BATCHxINxHIDDEN"));
  mem->add_option("--steps", mem_o.steps, "training steps recorded")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  mem->add_flag("!--no-graph", mem_o.graph, "leave out the CUDA graph of the forward pass");
  mem->add_flag("--json", json, "the event counts as JSON");
  if (int rc = unknown_command(app, std::vector<std::string>(argv + 1, argv + argc))) return rc;
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);  // prints help, the version, or the error
    return rc == 0 ? 0 : 2;
  }
  try {
    for (const std::string& lib : load_first) load_library(lib);
    for (const std::string& lib : load) load_library(lib);
    bound_omp_threads();
    for (auto* o : {&silu_o, &matmul_o})
      for (int& t : o->threads) t = clamp_threads(t, "--threads");
    if (*doc) return doctor(json);
    if (*ops) return list_ops(ns, json);
    if (*dmp) return dump(name);
    if (*opc) return cli::opcheck_command(opcheck_op, opcheck_samples);
    if (*dem) return debug_mode ? demo_debug_mode() : demo(device);
    if (*exp_cmd) return explain(explain_name, explain_args, explain_include, explain_exclude);
    if (*cdemo) return compile_demo(compile_device);
    if (*b_dispatch && dispatch_self_check > 0 && !bench_out.plot.empty()) {
      std::fprintf(stderr,
                   "minitensor bench dispatch: --self-check prints ranges of ratios and draws no "
                   "plot; leave out --plot (or --self-check)\n");
      return 2;
    }
    if (*b_dispatch) return bench_dispatch(bench_out, dispatch_iters, dispatch_only, dispatch_self_check);
    if (*b_silu) return bench_silu(silu_o, bench_out);
    if (*b_matmul) return bench_matmul(matmul_o, bench_out);
    if (*b_mlp) return bench_mlp_cmd(mlp_o, bench_out);
    if (*b_graph) return bench_graph_cmd(graph_o, bench_out);
    if (*b_cpu) return bench_cpu_cmd(cpu_o, bench_out);
    if (*b_vmap) return bench_vmap_cmd(vmap_o, bench_out);
    if (*b_split) return bench_split_cmd(split_o, bench_out);
    if (*aut) {
      std::printf("%s", autocast_table().c_str());
      return 0;
    }
    if (*mem) return memory_cmd(mem_o, json);
    if (*cac && !cache_plot_path.empty()) return cache_plot(cache_plot_path, cache_demo);
    if (*cac) return cache_cmd(cache_what, json);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "minitensor: %s\n", e.what());
    return 1;
  }
  return 0;
}
