// SPDX-License-Identifier: MIT
// The minitensor command: doctor, ops, dump, demo, bench, cache.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "dispatcher/load_library.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/jit/cache.h"
#include "kernels/jit/nvrtc.h"
#include "minitensor.h"
#include "tools/bench/host_loop.h"
#include "tools/bench/matmul.h"
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

int doctor(bool json) {
  std::vector<std::pair<std::string, std::string>> kv;
  kv.emplace_back("version", MT_VERSION);
  kv.emplace_back("compiler", __VERSION__);
#ifdef MT_HAVE_CUDA
  kv.emplace_back("cuda backend", "built (driver and NVRTC loaded at run time)");
#elif defined(MT_CUDA_DISABLED)
  kv.emplace_back("cuda backend", "not built (configured with -Dcuda=disabled)");
#else
  kv.emplace_back("cuda backend", "not built (no cuda.h/nvrtc.h at configure time)");
#endif
  kv.emplace_back("cpu", fmt::format("{} ({} hardware threads)", cpu_model(), std::thread::hardware_concurrency()));
  bool cuda_ok = cuda::is_available();
  kv.emplace_back("cuda driver", cuda_ok ? fmt::format("found, {} device(s), driver {}", cuda::device_count(), cuda::driver_version())
                                         : "unavailable: " + cuda::unavailable_reason());
  for (int i = 0; cuda_ok && i < cuda::device_count(); ++i) {
    const auto& p = cuda::device_props(i);
    kv.emplace_back(fmt::format("cuda:{}", i), fmt::format("{}, sm_{}{}, {} SMs, {:.1f} GiB", p.name, p.major, p.minor,
                                                          p.sm_count, double(p.total_memory) / (1 << 30)));
  }
  if (jit::nvrtc_available()) {
    jit::NvrtcVersion v = jit::nvrtc_version();
    std::vector<std::string> archs;
    for (int a : jit::nvrtc_supported_archs()) archs.push_back(fmt::format("sm_{}", a));
    kv.emplace_back("nvrtc", fmt::format("{}.{} at {}; archs {}", v.major, v.minor, jit::nvrtc_library_path(), fmt::join(archs, " ")));
  } else {
    kv.emplace_back("nvrtc", "unavailable: " + jit::nvrtc_unavailable_reason());
  }
  try {
    auto& cache = jit::kernel_cache();
    kv.emplace_back("kernel cache", cache.disk_enabled()
                                        ? fmt::format("{} ({} entries, {:.1f} MiB of {} MiB)", cache.config().dir, cache.list().size(),
                                                      double(cache.disk_bytes()) / (1 << 20), cache.config().max_bytes >> 20)
                                        : std::string("memory only (MT_KERNEL_CACHE=0)"));
  } catch (const Error& e) {
    kv.emplace_back("kernel cache", std::string("error: ") + e.what());
  }
  // A tiny SiLU on every device, checked against the CPU.
  Tensor x = linspace(-4, 4, 33);
  Tensor ref = silu(x);
  kv.emplace_back("silu on cpu", "ok");
  bool all_ok = true;
  for (int i = 0; cuda_ok && i < cuda::device_count(); ++i) {
    try {
      double d = max_abs_diff(silu(x.to(Device(DeviceType::CUDA, i))).cpu(), ref);
      kv.emplace_back(fmt::format("silu on cuda:{}", i), fmt::format("max |diff| vs cpu {:.2g}: {}", d, d < 1e-5 ? "ok" : "MISMATCH"));
      all_ok = all_ok && d < 1e-5;
    } catch (const Error& e) {
      kv.emplace_back(fmt::format("silu on cuda:{}", i), std::string("error: ") + e.what());
      all_ok = false;
    }
  }
  if (json) {
    Json j = Json::object();
    for (auto& [k, v] : kv) j[k] = v;
    print_json(j);
  } else {
    for (auto& [k, v] : kv) std::printf("%-14s %s\n", k.c_str(), v.c_str());
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
    if (json) {
      out.push_back({{"name", n.str()}, {"schema", h.schema().str()}, {"kernels", keys}});
    } else {
      std::printf("%-60s [%s]\n", h.schema().str().c_str(), fmt::format("{}", fmt::join(keys, ", ")).c_str());
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

int dump(const std::string& name) {
  std::optional<decltype(make_demo_op())> demo;
  if (name == "triton_demo::silu") demo.emplace(make_demo_op());
  std::printf("%s\n%s", dispatcher().dump(name).c_str(), dispatcher().dump_table(name).c_str());
  return 0;
}

// ---- demo ------------------------------------------------------------------------------

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

// ---- bench dispatch ----------------------------------------------------------------------

Tensor noop(const Tensor& x) { return x; }

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

int bench_dispatch(const BenchOutput& o) {
  Library lib(Library::Kind::Def, "bench");
  lib.def("noop(Tensor x) -> Tensor");
  lib.impl("noop", DispatchKey::CPU, noop);
  lib.def("noop_ag(Tensor x) -> Tensor");
  lib.impl("noop_ag", DispatchKey::CPU, noop);
  auto ag = dispatcher().find_or_throw("bench::noop_ag").typed<Tensor(const Tensor&)>();
  lib.impl("noop_ag", DispatchKey::Autograd, [ag](DispatchKeySet ks, const Tensor& x) {
    return ag.redispatch(ks.below(DispatchKey::Autograd), x);
  });
  auto op = dispatcher().find_or_throw("bench::noop").typed<Tensor(const Tensor&)>();
  Tensor x = zeros({1});
  Tensor xg = zeros({1}, {.requires_grad = true});
  Tensor (*volatile direct)(const Tensor&) = &noop;
  const int64_t n = 2000000;
  double t_direct = bench::ns_per_call([&] { Tensor r = direct(x); (void)r; }, n);
  double t_cpu = bench::ns_per_call([&] { Tensor r = op(x); (void)r; }, n);
  double t_ag = bench::ns_per_call([&] { Tensor r = ag(xg); (void)r; }, n);
  auto handle = dispatcher().find_or_throw("bench::noop");
  double t_boxed = bench::ns_per_call([&] { Stack s{x}; handle.call_boxed(&s); }, n / 4);
  Tensor one = ones({1}, {.requires_grad = true});
  double t_silu = bench::ns_per_call([&] { Tensor r = silu(one); (void)r; }, n / 20);
  Tensor a = ones({1}), b = ones({1});
  double t_add = bench::ns_per_call([&] { Tensor r = add(a, b); (void)r; }, n / 20);
  struct Row { const char* name; double ns; };
  Row rows[] = {{"direct C++ call of the no-op kernel", t_direct},
                {"unboxed dispatch, CPU kernel only", t_cpu},
                {"unboxed dispatch, Autograd kernel redispatching to CPU", t_ag},
                {"boxed call (Stack)", t_boxed},
                {"mt::silu on 1 element, requires grad (records the tape)", t_silu},
                {"mt::add on 1 element", t_add}};
  if (!o.plot.empty()) {
    bench::BarPlot plot{.title = fmt::format("dispatch cost, ns per call (median of 5 runs), {}", cpu_model()),
                        .value_label = "ns per call"};
    for (const Row& r : rows) plot.bars.push_back({r.name, r.ns});
    write_plot(o.plot, bench::svg(plot));
  }
  if (o.json) {
    Json j = Json::object();
    for (const Row& r : rows) j[r.name] = std::round(r.ns * 100) / 100;
    print_json(j);
    return 0;
  }
  std::printf("dispatch cost, ns per call (median of 5 runs), on %s\n", cpu_model().c_str());
  for (const Row& r : rows)
    std::printf("  %-58s %8.1f ns   (+%.1f ns over direct)\n", r.name, r.ns, r.ns - t_direct);
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

int bench_mlp_cmd(const MlpCliOptions& m, const BenchOutput& o) {
  Device dev = bench_device(m.device, "bench mlp");
  std::vector<mlp::Shape> shapes;
  for (const std::string& s : m.shapes) shapes.push_back(*parse_mlp_shape(s));  // checked by CLI11
  bench::MlpOptions opts = m.opts;
  if (m.warmup >= 0) opts.warmup = m.warmup;
  if (m.steps >= 0) opts.steps = m.steps;
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
    print_json({{"bench", "mlp"}, {"device", dev.str()}, {"where", where}, {"lr", opts.lr}, {"rows", json_rows}});
    return 0;
  }
  std::printf("two-layer MLP with SiLU (output dim = in), one SGD training step: forward, mse_loss, backward,\n"
              "update under NoGradGuard, zero grads; median ms per step after warm-up, on %s\n",
              where.c_str());
  std::vector<std::vector<std::string>> table;
  for (const auto& r : rows)
    table.push_back({label(r.shape), fmt::format("{}", r.shape.out), fmt::format("{}", r.steps),
                     fmt::format("{:.3f}", r.ms_median), fmt::format("{:.3f}", r.ms_min), fmt::format("{:.3f}", r.ms_max),
                     fmt::format("{:.4g} -> {:.4g}", r.loss_first, r.loss_last)});
  bench::print_table({"batch/in/hidden", "out", "steps", "ms/step", "min", "max", "loss (timed steps)"}, table);
  return 0;
}

// ---- cache -----------------------------------------------------------------------------

int cache_cmd(const std::string& what, bool json) {
  auto& cache = jit::kernel_cache();
  const std::string& dir = cache.config().dir;
  if (what == "clear") {
    MT_CHECK(cache.disk_enabled(), "[cache] there is no disk cache to clear (MT_KERNEL_CACHE=0)");
    cache.clear();  // throws, with the reason, when it cannot
    if (json)
      print_json({{"cleared", dir}});
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
  if (json) {
    Json out = Json::array();
    for (const auto& e : entries)
      out.push_back({{"key", e.key}, {"name", e.name}, {"target", e.target}, {"arch", e.arch}, {"path", e.path},
                     {"bytes", e.size_bytes}, {"age_s", e.age_s}, {"valid", e.valid}, {"problem", e.problem}});
    print_json(out);
    return 0;
  }
  for (const auto& e : entries)
    std::printf("%s  %-12s %-10s %8llu B  %8.0f s  %s\n", e.key.substr(0, 16).c_str(), mt::quoted(e.name).c_str(), e.target.c_str(),
                (unsigned long long)e.size_bytes, e.age_s, e.valid ? "ok" : e.problem.c_str());
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

int main(int argc, char** argv) {
  CLI::App app{"minitensor: a small tensor runtime with its own op dispatcher"};
  app.require_subcommand(1);
  app.set_version_flag("-V,--version", std::string("minitensor ") + MT_VERSION);
  app.footer(
      "Exit codes: 0 success; 1 an error (the message says why) or a failed check (doctor);\n"
      "2 a usage error (an unknown command or option, a bad value).");
  std::vector<std::string> load;
  app.add_option("--load", load,
                 "load a shared library of ops first (its MT_LIBRARY blocks register), e.g. "
                 "minitensor --load ./libmyops.so ops; repeatable")
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
  auto* dem = app.add_subcommand("demo", "the tutorial's flow, step by step");
  dem->add_option("--device", device, "cpu or cuda");
  // bench: each benchmark is a subcommand; --json and --plot may come before or after it.
  BenchOutput bench_out;
  auto* ben = app.add_subcommand("bench", "benchmarks: dispatch, silu, matmul, mlp (a table; --json, --plot)");
  ben->require_subcommand(1);
  ben->add_flag("--json", bench_out.json, "print JSON on stdout instead of the table");
  ben->add_option("--plot", bench_out.plot, "also draw the results into this SVG file");
  auto* b_dispatch = ben->add_subcommand("dispatch", "ns per call through the dispatcher, against a direct call");
  SweepOptions silu_o, matmul_o;
  auto* b_silu = ben->add_subcommand("silu", "SiLU forward and fused backward over sizes, against a copy of the same bytes");
  auto* b_matmul = ben->add_subcommand("matmul", "square float32 matmul over sizes: time, GFLOP/s, copy floor");
  for (auto [sub, o] : {std::pair{b_silu, &silu_o}, std::pair{b_matmul, &matmul_o}}) {
    sub->add_option("--device", o->device, "cpu or cuda (cuda:N)")->capture_default_str();
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
  b_mlp->add_option("--device", mlp_o.device, "cpu or cuda (cuda:N)")->capture_default_str();
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
  for (auto* sub : {b_dispatch, b_silu, b_matmul, b_mlp}) sub->fallthrough();
  std::string cache_what = "ls";
  auto* cac = app.add_subcommand("cache", "the NVRTC kernel cache: ls, stats, clear");
  cac->add_option("what", cache_what, "ls | stats | clear")->check(CLI::IsMember({"ls", "stats", "clear"}));
  cac->add_flag("--json", json, "machine-readable output");
  if (int rc = unknown_command(app, std::vector<std::string>(argv + 1, argv + argc))) return rc;
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);  // prints help, the version, or the error
    return rc == 0 ? 0 : 2;
  }
  try {
    for (const std::string& lib : load) load_library(lib);
    bound_omp_threads();
    for (auto* o : {&silu_o, &matmul_o})
      for (int& t : o->threads) t = clamp_threads(t, "--threads");
    if (*doc) return doctor(json);
    if (*ops) return list_ops(ns, json);
    if (*dmp) return dump(name);
    if (*dem) return demo(device);
    if (*b_dispatch) return bench_dispatch(bench_out);
    if (*b_silu) return bench_silu(silu_o, bench_out);
    if (*b_matmul) return bench_matmul(matmul_o, bench_out);
    if (*b_mlp) return bench_mlp_cmd(mlp_o, bench_out);
    if (*cac) return cache_cmd(cache_what, json);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "minitensor: %s\n", e.what());
    return 1;
  }
  return 0;
}
