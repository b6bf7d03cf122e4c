// The minitensor command: doctor, ops, dump, demo, bench, cache.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <thread>

#include "kernels/jit/cache.h"
#include "kernels/jit/nvrtc.h"
#include "minitensor.h"

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

// The tutorial's op, as the demo and `dump triton_demo::silu` show it.
auto make_demo_op() {
  auto op = custom_op("triton_demo::silu", [](const Tensor& x) {
    Tensor xc = x.contiguous().to(DType::Float64);
    Tensor out = empty(x.sizes(), {.dtype = DType::Float64});
    const double* in = xc.data_ptr<double>();
    double* o = out.data_ptr<double>();
    for (int64_t i = 0; i < x.numel(); ++i) o[i] = in[i] / (1.0 + std::exp(-in[i]));
    return out.to(x.dtype());
  });
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
  std::printf("The tutorial's flow, in C++, on %s.\n", dev.str().c_str());
  step(1, "register: custom_op(\"triton_demo::silu\", fn) defines the op, fn is its CPU kernel");
  auto op = make_demo_op();
  std::printf("schema: %s\n", op.schema().str().c_str());
  std::printf("%s", dispatcher().dump_table("triton_demo::silu").c_str());

  step(2, "fake: register_fake gave it a shape function; fake tensors carry no data");
  Tensor f = fake_empty({2, 3}, {.device = Device("cuda:0")});
  std::printf("silu(fake cuda:0 [2, 3]) = %s\n", op(f).str().c_str());

  step(3, "autograd: register_autograd records a tape entry; backward walks it");
  Tensor x = linspace(-2, 2, 5, {.requires_grad = true});
  Tensor y = op(x);
  Tensor loss = sum(y);
  std::printf("tape:\n%s", autograd::dump_tape().c_str());
  backward(loss);
  std::printf("x.grad = %s\n", x.grad().str().c_str());

  step(4, "check: compare with mt::silu and x * sigmoid(x)");
  std::printf("max |diff| vs mt::silu: %.3g\n", max_abs_diff(op(x.detach()), silu(x.detach())));

  step(5, "gradcheck: float64 central differences against the tape's gradient");
  Tensor xd = randn({6}, {.dtype = DType::Float64, .requires_grad = true});
  auto gc = gradcheck([&](const std::vector<Tensor>& in) { return op(in[0]); }, {xd});
  std::printf("gradcheck: %s %s\n", gc.ok ? "PASS" : "FAIL", gc.message.c_str());

  step(6, "opcheck: schema, fake vs real, autograd registration, gradcheck");
  std::printf("%s", opcheck(op.handle(), {Stack{randn({3, 4})}}).str().c_str());

  step(7, "the dispatch trace of one call that requires grad (MT_TRACE=dispatch)");
  Dispatcher::singleton().set_log_sink([](std::string_view l) { std::printf("%.*s\n", int(l.size()), l.data()); });
  Dispatcher::singleton().set_trace_dispatch(true);
  op(x);
  Dispatcher::singleton().set_trace_dispatch(false);
  Dispatcher::singleton().set_log_sink(nullptr);

  step(8, "benchmark: the built-in mt::silu on this device");
  Tensor big = randn({1 << 20}).to(dev);
  silu(big);
  if (dev.is_cuda()) cuda::synchronize(dev.index);
  std::vector<double> ms;
  for (int r = 0; r < 10; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    silu(big);
    if (dev.is_cuda()) cuda::synchronize(dev.index);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  std::printf("mt::silu on 2^20 float32 on %s: median %.3f ms (wall clock, 10 runs)\n", dev.str().c_str(), ms[5]);

  step(9, "train: a two-layer MLP with SiLU is examples/mlp_train (tools/dev.sh demo runs it next)");
  return 0;
}

// ---- bench dispatch ----------------------------------------------------------------------

Tensor noop(const Tensor& x) { return x; }

template <typename F>
double ns_per_call(F&& f, int64_t iters) {
  std::vector<double> runs;
  for (int r = 0; r < 5; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < iters; ++i) f();
    runs.push_back(std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / double(iters));
  }
  std::sort(runs.begin(), runs.end());
  return runs[2];
}

int bench_dispatch(bool json) {
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
  double t_direct = ns_per_call([&] { Tensor r = direct(x); (void)r; }, n);
  double t_cpu = ns_per_call([&] { Tensor r = op(x); (void)r; }, n);
  double t_ag = ns_per_call([&] { Tensor r = ag(xg); (void)r; }, n);
  auto handle = dispatcher().find_or_throw("bench::noop");
  double t_boxed = ns_per_call([&] { Stack s{x}; handle.call_boxed(&s); }, n / 4);
  Tensor one = ones({1}, {.requires_grad = true});
  double t_silu = ns_per_call([&] { Tensor r = silu(one); (void)r; }, n / 20);
  Tensor a = ones({1}), b = ones({1});
  double t_add = ns_per_call([&] { Tensor r = add(a, b); (void)r; }, n / 20);
  struct Row { const char* name; double ns; };
  Row rows[] = {{"direct C++ call of the no-op kernel", t_direct},
                {"unboxed dispatch, CPU kernel only", t_cpu},
                {"unboxed dispatch, Autograd kernel redispatching to CPU", t_ag},
                {"boxed call (Stack)", t_boxed},
                {"mt::silu on 1 element, requires grad (records the tape)", t_silu},
                {"mt::add on 1 element", t_add}};
  if (json) {
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
  std::string what;
  auto* ben = app.add_subcommand("bench", "benchmarks: dispatch (silu: build/tools/bench_silu)");
  ben->add_option("what", what, "dispatch")->required();
  ben->add_flag("--json", json, "machine-readable output");
  std::string cache_what = "ls";
  auto* cac = app.add_subcommand("cache", "the NVRTC kernel cache: ls, stats, clear");
  cac->add_option("what", cache_what, "ls | stats | clear");
  CLI11_PARSE(app, argc, argv);
  try {
    if (*doc) return doctor(json);
    if (*ops) return list_ops(ns, json);
    if (*dmp) return dump(name);
    if (*dem) return demo(device);
    if (*ben) {
      if (what == "dispatch") return bench_dispatch(json);
      std::fprintf(stderr, "minitensor bench: unknown benchmark '%s' (have: dispatch; SiLU on the GPU is build/tools/bench_silu)\n", what.c_str());
      return 2;
    }
    if (*cac) return cache_cmd(cache_what);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "minitensor: %s\n", e.what());
    return 1;
  }
  return 0;
}
