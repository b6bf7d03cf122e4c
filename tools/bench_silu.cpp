// bench_silu: SiLU forward and fused backward on one CUDA device, timed like
// triton.testing.do_bench (CUDA events, warm-up, repeats, median, an L2 flush between
// repeats), next to a device-to-device copy of the same bytes (the bandwidth ceiling)
// and an unfused baseline (a sigmoid kernel, then a multiply kernel) JIT-compiled from a
// user source string. Also: host cost of one mt::silu call through the dispatcher, and
// NVRTC cold compile / warm-disk-cache first launch (measured in child processes with
// a fresh MT_KERNEL_CACHE directory).
//
//   bench_silu [--json FILE] [--repeats N] [--max-log2 K]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <unistd.h>

#include <fmt/format.h>

#include "kernels/jit/builtin.h"
#include "kernels/jit/module.h"
#include "minitensor.h"
#include "runtime/cuda/cuda.h"
#include "runtime/cuda/driver.h"

using namespace mt;
using Clock = std::chrono::steady_clock;

namespace {

const Device kGpu{DeviceType::CUDA, 0};
int g_repeats = 50;
int g_warmup = 5;

const char* kUnfusedSource = R"(
#include "common.cuh"
template <typename T>
__global__ void sigmoid_k(const T* x, T* s, long long n) {
  for (long long i = mt::global_thread_index(); i < n; i += mt::grid_stride()) {
    auto v = mt::load_compute(x[i]);
    s[i] = mt::store_compute<T>(1 / (1 + mt::exp_(-v)));
  }
}
template <typename T>
__global__ void mul_k(const T* a, const T* b, T* out, long long n) {
  for (long long i = mt::global_thread_index(); i < n; i += mt::grid_stride())
    out[i] = mt::store_compute<T>(mt::load_compute(a[i]) * mt::load_compute(b[i]));
}
// The backward's second pass: grad * s * (1 + x * (1 - s)) from a stored sigmoid.
template <typename T>
__global__ void silu_grad_from_s_k(const T* g, const T* x, const T* s, T* out, long long n) {
  for (long long i = mt::global_thread_index(); i < n; i += mt::grid_stride()) {
    auto sv = mt::load_compute(s[i]);
    auto xv = mt::load_compute(x[i]);
    out[i] = mt::store_compute<T>(mt::load_compute(g[i]) * sv * (1 + xv * (1 - sv)));
  }
}
)";

const jit::Kernel& user_kernel(const std::string& name, DType t) {
  jit::KernelSpec spec{.name = "bench_unfused.cu", .source = kUnfusedSource};
  return jit::get_kernel(0, spec, fmt::format("{}<{}>", name, jit::kernel_type_name(t)));
}

struct Flusher {
  Tensor buf = empty({64 << 20}, {.dtype = DType::Float32, .device = kGpu});  // 256 MiB
  void flush() { buf.fill_(1.0); }
};

template <typename F>
double bench_ms(Flusher& fl, F&& fn) {
  cuda::EventTimer timer(0);
  for (int i = 0; i < g_warmup; ++i) fn();
  std::vector<float> ms;
  for (int i = 0; i < g_repeats; ++i) {
    fl.flush();
    timer.start();
    fn();
    timer.stop();
    ms.push_back(timer.elapsed_ms());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

struct Row {
  std::string dtype, pass;
  int log2n;
  double ms, gbps, pct_copy, copy_ms, unfused_ms, speedup;
};

double host_us_per_call(int calls, const std::function<void()>& fn) {
  for (int i = 0; i < 100; ++i) fn();
  cuda::synchronize(0);
  auto t0 = Clock::now();
  for (int i = 0; i < calls; ++i) fn();
  cuda::synchronize(0);
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / calls;
}

// Child mode: time the first mt::silu in this process (CUDA already initialised).
int child_first_launch() {
  Tensor x = ones({4096}, {.device = kGpu});
  cuda::synchronize(0);
  auto t0 = Clock::now();
  Tensor y = silu(x);
  cuda::synchronize(0);
  double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  std::printf("%.3f\n", ms);
  return 0;
}

double run_child(const std::string& cache_dir) {
  std::string cmd = fmt::format("MT_KERNEL_CACHE='{}' '{}' --child-first-launch", cache_dir,
                                std::filesystem::read_symlink("/proc/self/exe").string());
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return -1;
  char line[128] = {};
  double ms = -1;
  if (std::fgets(line, sizeof line, p)) ms = std::atof(line);
  pclose(p);
  return ms;
}

}  // namespace

int main(int argc, char** argv) {
  std::string json_path;
  int max_log2 = 28;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--child-first-launch") {
      try {
        return child_first_launch();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_silu child: %s\n", e.what());
        std::printf("-1\n");
        return 1;
      }
    }
    if (a == "--json" && i + 1 < argc) json_path = argv[++i];
    else if (a == "--repeats" && i + 1 < argc) g_repeats = std::atoi(argv[++i]);
    else if (a == "--max-log2" && i + 1 < argc) max_log2 = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: bench_silu [--json FILE] [--repeats N] [--max-log2 K]\n");
      return 2;
    }
  }
  if (!cuda::is_available()) {
    std::printf("bench_silu: CUDA unavailable: %s\n", cuda::unavailable_reason().c_str());
    return 1;
  }
  const auto& props = cuda::device_props(0);
  std::printf("device: %s, %d SMs, L2 %d MiB\n", props.name.c_str(), props.sm_count,
              props.l2_bytes >> 20);

  // NVRTC cold compile and warm-disk first launch, each in a fresh process.
  std::string cache_dir = fmt::format("/tmp/mt-bench-cache-{}", getpid());
  std::filesystem::remove_all(cache_dir);
  std::filesystem::create_directories(cache_dir);
  double cold_ms = run_child(cache_dir);
  double warm_ms = run_child(cache_dir);
  std::filesystem::remove_all(cache_dir);

  Flusher fl;
  CUstream stream = cuda::current_stream(0);
  const auto& drv = cuda::driver();
  std::vector<Row> rows;
  for (DType t : {DType::Float32, DType::BFloat16}) {
    const size_t es = dtype_size(t);
    const jit::Kernel *k_sig = nullptr, *k_mul = nullptr, *k_gs = nullptr;
    try {
      k_sig = &user_kernel("sigmoid_k", t);
      k_mul = &user_kernel("mul_k", t);
      k_gs = &user_kernel("silu_grad_from_s_k", t);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "unfused baseline unavailable for %s: %s\n", dtype_name(t).data(), e.what());
      k_sig = nullptr;
    }
    for (int lg = 12; lg <= max_log2; lg += 2) {
      long long n = 1LL << lg;
      // Random values (randn of at most 2^20 on the host), tiled on the device.
      auto tiled = [&](uint64_t seed) {
        Generator gen(seed);
        const long long chunk = std::min(n, 1LL << 20);
        Tensor base = randn({chunk}, {}, &gen).to(t).to(kGpu);
        Tensor out = empty({n}, {.dtype = t, .device = kGpu});
        for (long long off = 0; off < n; off += chunk)
          MT_CU_CHECK(cuda::driver().cuMemcpyDtoDAsync(
              reinterpret_cast<CUdeviceptr>(static_cast<char*>(out.data_ptr()) + off * es),
              reinterpret_cast<CUdeviceptr>(base.data_ptr()), size_t(chunk) * es,
              cuda::current_stream(0)));
        cuda::synchronize(0);
        return out;
      };
      Tensor x = tiled(1), g = tiled(2);
      Tensor y = empty({n}, {.dtype = t, .device = kGpu}), s = empty_like(y);
      Tensor cpy = empty({3 * n}, {.dtype = t, .device = kGpu}), cpy2 = empty_like(cpy);
      void *px = x.data_ptr(), *pg = g.data_ptr(), *py = y.data_ptr(), *ps = s.data_ptr();
      auto shape = jit::elementwise_launch_shape(n, props.sm_count);
      for (int pass = 0; pass < 2; ++pass) {
        const bool fwd = pass == 0;
        const size_t bytes = size_t(n) * es * (fwd ? 2 : 3);
        double ms = bench_ms(fl, [&] {
          if (fwd) jit::launch_silu_fwd(0, stream, t, px, py, n);
          else jit::launch_silu_bwd(0, stream, t, pg, px, py, n);
        });
        double unf = !k_sig ? std::nan("") : bench_ms(fl, [&] {
          void* a1[] = {&px, &ps, &n};
          k_sig->launch(shape.grid, shape.block, 0, stream, a1);
          if (fwd) {
            void* a2[] = {&px, &ps, &py, &n};
            k_mul->launch(shape.grid, shape.block, 0, stream, a2);
          } else {
            void* a2[] = {&pg, &px, &ps, &py, &n};
            k_gs->launch(shape.grid, shape.block, 0, stream, a2);
          }
        });
        // A copy reading bytes/2 and writing bytes/2 moves the same bytes.
        double copy_ms = bench_ms(fl, [&] {
          MT_CU_CHECK(drv.cuMemcpyDtoDAsync(reinterpret_cast<CUdeviceptr>(cpy2.data_ptr()),
                                            reinterpret_cast<CUdeviceptr>(cpy.data_ptr()),
                                            bytes / 2, stream));
        });
        rows.push_back({std::string(dtype_name(t)), fwd ? "fwd" : "bwd", lg, ms,
                        double(bytes) / ms / 1e6, 100.0 * copy_ms / ms, copy_ms, unf, unf / ms});
      }
    }
  }

  // Host cost through the dispatcher.
  Tensor hx = ones({4096}, {.device = kGpu});
  Tensor hg = ones({4096}, {.device = kGpu});
  double us_silu = host_us_per_call(10000, [&] { Tensor y = silu(hx); });
  double us_bwd = host_us_per_call(10000, [&] { Tensor y = silu_backward(hg, hx); });
  Tensor hxr = ones({4096}, {.device = kGpu});
  hxr.requires_grad_();
  double us_grad = host_us_per_call(2000, [&] { Tensor y = silu(hxr); });
  double us_launch = host_us_per_call(10000, [&] {
    jit::launch_silu_fwd(0, stream, DType::Float32, hx.data_ptr(), hg.data_ptr(), 4096);
  });

  std::printf("\n| dtype | pass | n | ms | GB/s | %% of copy | copy ms | unfused ms | speedup vs unfused |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  for (const Row& r : rows)
    std::printf("| %s | %s | 2^%d | %.4f | %.0f | %.1f | %.4f | %.4f | %.2fx |\n", r.dtype.c_str(),
                r.pass.c_str(), r.log2n, r.ms, r.gbps, r.pct_copy, r.copy_ms, r.unfused_ms,
                r.speedup);
  std::printf("\n| host cost (4096 elems, CUDA) | us/call |\n|---|---|\n");
  std::printf("| mt::silu via dispatcher | %.2f |\n| mt::silu_backward via dispatcher | %.2f |\n",
              us_silu, us_bwd);
  std::printf("| mt::silu, input requires grad | %.2f |\n| raw launch_silu_fwd | %.2f |\n", us_grad,
              us_launch);
  std::printf("\n| JIT (fresh process, first mt::silu incl. launch+sync) | ms |\n|---|---|\n");
  std::printf("| empty cache dir (NVRTC cold compile) | %.1f |\n| warm disk cache | %.1f |\n",
              cold_ms, warm_ms);

  if (!json_path.empty()) {
    std::string j = fmt::format("{{\"device\": \"{}\", \"rows\": [", props.name);
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      j += fmt::format(
          "{}{{\"dtype\": \"{}\", \"pass\": \"{}\", \"log2n\": {}, \"ms\": {}, \"gbps\": {}, "
          "\"pct_copy\": {}, \"copy_ms\": {}, \"unfused_ms\": {}, \"speedup_unfused\": {}}}",
          i ? ", " : "", r.dtype, r.pass, r.log2n, r.ms, r.gbps, r.pct_copy, r.copy_ms,
          std::isnan(r.unfused_ms) ? "NaN" : fmt::format("{}", r.unfused_ms),
          std::isnan(r.speedup) ? "NaN" : fmt::format("{}", r.speedup));
    }
    j += fmt::format(
        "], \"host_us\": {{\"silu\": {}, \"silu_backward\": {}, \"silu_requires_grad\": {}, "
        "\"raw_launch\": {}}}, \"jit_ms\": {{\"cold\": {}, \"warm_disk\": {}}}}}\n",
        us_silu, us_bwd, us_grad, us_launch, cold_ms, warm_ms);
    FILE* f = std::fopen(json_path.c_str(), "w");
    if (f) {
      std::fputs(j.c_str(), f);
      std::fclose(f);
    }
  }
  return 0;
}
