// The minitensor command: doctor, ops, dump, demo, bench, cache.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <thread>

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

std::string json_str(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') { out += "\\n"; continue; }
    out += c;
  }
  return out + "\"";
}

// ---- doctor ----------------------------------------------------------------------------

int doctor(bool json) {
  std::vector<std::pair<std::string, std::string>> kv;
  kv.emplace_back("version", MT_VERSION);
  kv.emplace_back("compiler", __VERSION__);
#ifdef MT_HAVE_CUDA
  kv.emplace_back("cuda backend", "built (driver and NVRTC loaded at run time)");
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
    std::printf("{");
    for (size_t i = 0; i < kv.size(); ++i) std::printf("%s%s: %s", i ? ", " : "", json_str(kv[i].first).c_str(), json_str(kv[i].second).c_str());
    std::printf("}\n");
  } else {
    for (auto& [k, v] : kv) std::printf("%-14s %s\n", k.c_str(), v.c_str());
  }
  return all_ok ? 0 : 1;
}

// ---- ops, dump --------------------------------------------------------------------------

int list_ops(const std::string& ns, bool json) {
  auto ops = dispatcher().all_ops();
  if (json) std::printf("[");
  bool first = true;
  for (const OperatorName& n : ops) {
    if (!ns.empty() && n.ns != ns) continue;
    auto h = dispatcher().find_or_throw(n.str());
    const DispatchTable& t = h.entry()->table();
    std::vector<std::string> keys;
    for (int k = 0; k < kNumDispatchKeys; ++k)
      if (t.origin[size_t(k)] == 1) keys.emplace_back(dispatch_key_name(DispatchKey(k)));
    if (json) {
      std::printf("%s{\"name\": %s, \"schema\": %s, \"kernels\": [", first ? "" : ", ", json_str(n.str()).c_str(),
                  json_str(h.schema().str()).c_str());
      for (size_t i = 0; i < keys.size(); ++i) std::printf("%s%s", i ? ", " : "", json_str(keys[i]).c_str());
      std::printf("]}");
    } else {
      std::printf("%-60s [%s]\n", h.schema().str().c_str(), fmt::format("{}", fmt::join(keys, ", ")).c_str());
    }
    first = false;
  }
  if (json) std::printf("]\n");
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

// A JSON number; NaN and infinities (a variant that could not run) become null.
std::string jnum(double v) { return std::isfinite(v) ? fmt::format("{}", v) : "null"; }

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
    std::printf("{");
    for (size_t i = 0; i < std::size(rows); ++i) std::printf("%s%s: %.2f", i ? ", " : "", json_str(rows[i].name).c_str(), rows[i].ns);
    std::printf("}\n");
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
  std::string json;
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
      json += fmt::format("{}{{\"op\": \"{}\", \"threads\": {}, \"n\": {}, \"us\": {}, \"gbps\": {}, \"copy_us\": {}, "
                          "\"copy_gbps\": {}}}",
                          i ? ", " : "", r.op, r.threads, r.n, jnum(r.seconds * 1e6), jnum(r.gbps),
                          jnum(r.copy_seconds * 1e6), jnum(r.copy_gbps));
    }
    if (o.json) {
      std::printf("{\"bench\": \"silu\", \"device\": \"cpu\", \"cpu\": %s, \"rows\": [%s]}\n", json_str(cpu_model()).c_str(),
                  json.c_str());
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
      json += fmt::format("{}{{\"dtype\": \"{}\", \"pass\": \"{}\", \"log2n\": {}, \"ms\": {}, \"gbps\": {}, \"pct_copy\": {}, "
                          "\"copy_ms\": {}, \"unfused_ms\": {}, \"speedup_unfused\": {}}}",
                          i ? ", " : "", r.dtype, r.pass, r.log2n, jnum(r.ms), jnum(r.gbps), jnum(r.pct_copy), jnum(r.copy_ms),
                          jnum(r.unfused_ms), jnum(r.speedup));
    }
    if (o.json) {
      std::printf("{\"bench\": \"silu\", \"device\": %s, \"gpu\": %s, \"rows\": [%s]}\n", json_str(dev.str()).c_str(),
                  json_str(gpu).c_str(), json.c_str());
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
    std::string json;
    for (size_t i = 0; i < rows.size(); ++i) {
      const auto& r = rows[i];
      json += fmt::format("{}{{\"size\": {}, \"path\": \"{}\", \"threads\": {}, \"ms\": {}, \"gflops\": {}, \"copy_ms\": {}}}",
                          i ? ", " : "", r.size, r.path, r.threads, jnum(r.seconds * 1e3), jnum(r.gflops),
                          jnum(r.copy_seconds * 1e3));
    }
    std::printf("{\"bench\": \"matmul\", \"device\": %s, \"where\": %s, \"rows\": [%s]}\n", json_str(dev.str()).c_str(),
                json_str(where).c_str(), json.c_str());
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

mlp::Shape parse_mlp_shape(const std::string& text) {
  long long b = 0, i = 0, h = 0;
  char tail = 0;
  MT_CHECK(std::sscanf(text.c_str(), "%lldx%lldx%lld%c", &b, &i, &h, &tail) == 3 && b > 0 && i > 0 && h > 0,
           "[bench mlp] --shape takes BATCHxINxHIDDEN (e.g. 64x32x64), got '{}'", text);
  return {.batch = b, .in = i, .hidden = h, .out = i};  // output dim = input dim
}

int bench_mlp_cmd(const MlpCliOptions& m, const BenchOutput& o) {
  Device dev = bench_device(m.device, "bench mlp");
  std::vector<mlp::Shape> shapes;
  for (const std::string& s : m.shapes) shapes.push_back(parse_mlp_shape(s));
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
    std::string json;
    for (size_t i = 0; i < rows.size(); ++i) {
      const auto& r = rows[i];
      json += fmt::format("{}{{\"batch\": {}, \"in\": {}, \"hidden\": {}, \"out\": {}, \"steps\": {}, \"ms_median\": {}, "
                          "\"ms_min\": {}, \"ms_max\": {}, \"loss_first\": {}, \"loss_last\": {}}}",
                          i ? ", " : "", r.shape.batch, r.shape.in, r.shape.hidden, r.shape.out, r.steps, jnum(r.ms_median),
                          jnum(r.ms_min), jnum(r.ms_max), jnum(r.loss_first), jnum(r.loss_last));
    }
    std::printf("{\"bench\": \"mlp\", \"device\": %s, \"where\": %s, \"lr\": %s, \"rows\": [%s]}\n", json_str(dev.str()).c_str(),
                json_str(where).c_str(), jnum(opts.lr).c_str(), json.c_str());
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

int cache_cmd(const std::string& what) {
  auto& cache = jit::kernel_cache();
  if (what == "clear") {
    cache.clear();
    std::printf("cleared %s\n", cache.config().dir.c_str());
    return 0;
  }
  if (what == "stats") {
    std::printf("dir %s\nentries %zu, %.2f MiB of %llu MiB\n", cache.config().dir.c_str(), cache.list().size(),
                double(cache.disk_bytes()) / (1 << 20), (unsigned long long)(cache.config().max_bytes >> 20));
    return 0;
  }
  for (const auto& e : cache.list())
    std::printf("%s  %-12s %-10s %8llu B  %8.0f s  %s\n", e.key.substr(0, 16).c_str(), e.name.c_str(), e.target.c_str(),
                (unsigned long long)e.size_bytes, e.age_s, e.valid ? "ok" : e.problem.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"minitensor: a small tensor runtime with its own op dispatcher"};
  app.require_subcommand(1);
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
    sub->add_option("--min-log2", o->min_log2, "smallest size, as a power of two (silu 12, matmul 6)");
    sub->add_option("--max-log2", o->max_log2, "largest size, as a power of two (silu: cpu 24, cuda 28; matmul: cpu 10, cuda 13)");
    sub->add_option("--threads", o->threads, "CPU: thread counts to run, e.g. --threads 1,2 (default: the kernels' count)")
        ->delimiter(',');
    sub->add_option("--min-time", o->min_time, "CPU: seconds of repeats per figure, at least")->capture_default_str();
    sub->add_option("--repeats", o->repeats, "CUDA: timed runs per figure (median)")->capture_default_str();
    sub->add_option("--warmup", o->warmup, "CUDA: untimed runs first")->capture_default_str();
  }
  b_silu->add_option("--dtype", silu_o.dtype, "CUDA: float32 or bfloat16 (the CPU runs float32)")->capture_default_str();
  MlpCliOptions mlp_o;
  auto* b_mlp = ben->add_subcommand("mlp", "ms per training step of examples/mlp.h's two-layer MLP (64/32/64, 4096/1024/4096)");
  b_mlp->add_option("--device", mlp_o.device, "cpu or cuda (cuda:N)")->capture_default_str();
  b_mlp->add_option("--shape", mlp_o.shapes, "BATCHxINxHIDDEN, repeatable (output dim = IN)")->capture_default_str();
  b_mlp->add_option("--steps", mlp_o.steps, "timed steps, at most (default 50; fewer past --max-seconds)");
  b_mlp->add_option("--warmup", mlp_o.warmup, "untimed steps first (default 5)");
  b_mlp->add_option("--max-seconds", mlp_o.opts.max_seconds, "per shape: stop timing after this long (3 timed steps at least)")
      ->capture_default_str();
  for (auto* sub : {b_dispatch, b_silu, b_matmul, b_mlp}) sub->fallthrough();
  std::string cache_what = "ls";
  auto* cac = app.add_subcommand("cache", "the NVRTC kernel cache: ls, stats, clear");
  cac->add_option("what", cache_what, "ls | stats | clear");
  CLI11_PARSE(app, argc, argv);
  try {
    if (*doc) return doctor(json);
    if (*ops) return list_ops(ns, json);
    if (*dmp) return dump(name);
    if (*dem) return demo(device);
    if (*b_dispatch) return bench_dispatch(bench_out);
    if (*b_silu) return bench_silu(silu_o, bench_out);
    if (*b_matmul) return bench_matmul(matmul_o, bench_out);
    if (*b_mlp) return bench_mlp_cmd(mlp_o, bench_out);
    if (*cac) return cache_cmd(cache_what);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "minitensor: %s\n", e.what());
    return 1;
  }
  return 0;
}
