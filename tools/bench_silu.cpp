// SPDX-License-Identifier: MIT
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
#include <nlohmann/json.hpp>

#include "kernels/gpu/silu.h"
#include "kernels/jit/builtin.h"
#include "kernels/jit/module.h"
#include "minitensor.h"
#include "runtime/cuda/cuda.h"
#include "runtime/cuda/driver.h"
#include "tools/bench/silu.h"

using namespace mt;
using Clock = std::chrono::steady_clock;

namespace {

const Device kGpu{DeviceType::CUDA, 0};
bench::CudaTiming g_timing;  // 5 warm-up runs, 50 repeats, L2 flushed before each

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
    else if (a == "--repeats" && i + 1 < argc) g_timing.repeats = std::atoi(argv[++i]);
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

  bench::Progress quiet;
  const std::vector<bench::SiluCudaRow> rows =
      bench::silu_cuda_sweep(0, {DType::Float32, DType::BFloat16}, 12, max_log2, g_timing, quiet);
  CUstream stream = cuda::current_stream(0);

  // Host cost through the dispatcher.
  Tensor hx = ones({4096}, {.device = kGpu});
  Tensor hg = ones({4096}, {.device = kGpu});
  double us_silu = host_us_per_call(10000, [&] { Tensor y = silu(hx); });
  double us_bwd = host_us_per_call(10000, [&] { Tensor y = silu_backward(hg, hx); });
  Tensor hxr = ones({4096}, {.device = kGpu});
  hxr.requires_grad_();
  double us_grad = host_us_per_call(2000, [&] { Tensor y = silu(hxr); });
  double us_launch = host_us_per_call(10000, [&] {
    gpu::launch_silu_fwd(0, stream, DType::Float32, hx.data_ptr(), hg.data_ptr(), 4096);
  });
  // The floor under the raw launch: cuLaunchKernel itself, of the kernel launch_silu_fwd
  // picks for these aligned pointers (silu_fwd_vec<float, 2>) with its grid, arguments
  // packed once, the context already current. The gap to the row above is what the
  // launcher adds (context check, stream lookup, argument packing, launch shape).
  const jit::Kernel& bare = jit::get_kernel(0, jit::builtin_spec("silu.cu"),
                                            jit::silu_name_expression(jit::SiluKernel::FwdVec,
                                                                      DType::Float32));
  const jit::LaunchShape bare_shape = jit::vec_launch_shape(
      (4096 / 4 + jit::kSiluUnroll - 1) / jit::kSiluUnroll);
  const void* bare_x = hx.data_ptr();
  void* bare_y = hg.data_ptr();
  long long bare_n = 4096;
  void* bare_args[] = {&bare_x, &bare_y, &bare_n};
  double us_bare = 0;
  {
    cuda::DeviceGuard guard(0);
    us_bare = host_us_per_call(10000, [&] {
      cuda::check(cuda::driver().cuLaunchKernel(
                      bare.function(), bare_shape.grid.x, bare_shape.grid.y, bare_shape.grid.z,
                      bare_shape.block.x, bare_shape.block.y, bare_shape.block.z, 0, stream,
                      bare_args, nullptr),
                  "cuLaunchKernel");
    });
  }

  std::printf("\n| dtype | pass | n | ms | GB/s | %% of copy | copy ms | unfused ms | speedup vs unfused |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  for (const bench::SiluCudaRow& r : rows)
    std::printf("| %s | %s | 2^%d | %.4f | %.0f | %.1f | %.4f | %.4f | %.2fx |\n", r.dtype.c_str(),
                r.pass.c_str(), r.log2n, r.ms, r.gbps, r.pct_copy, r.copy_ms, r.unfused_ms,
                r.speedup);
  std::printf("\nA user's SiLU against mt::silu / mt::silu_backward called as ops (each allocates "
              "its output):\n");
  std::printf("| dtype | pass | n | mt op ms | user pointwise ms | pointwise/op | user raw ms | "
              "raw/op |\n|---|---|---|---|---|---|---|---|\n");
  for (const bench::SiluCudaRow& r : rows)
    std::printf("| %s | %s | 2^%d | %.4f | %.4f | %.3fx | %.4f | %.3fx |\n", r.dtype.c_str(),
                r.pass.c_str(), r.log2n, r.op_ms, r.user_pointwise_ms,
                r.user_pointwise_ms / r.op_ms, r.user_raw_ms, r.user_raw_ms / r.op_ms);
  std::printf("\n| host cost (4096 elems, CUDA) | us/call |\n|---|---|\n");
  std::printf("| mt::silu via dispatcher | %.2f |\n| mt::silu_backward via dispatcher | %.2f |\n",
              us_silu, us_bwd);
  std::printf("| mt::silu, input requires grad | %.2f |\n| raw launch_silu_fwd | %.2f |\n", us_grad,
              us_launch);
  std::printf("| bare cuLaunchKernel of silu_fwd_vec<float, 2> | %.2f |\n", us_bare);
  std::printf("\n| JIT (fresh process, first mt::silu incl. launch+sync) | ms |\n|---|---|\n");
  std::printf("| empty cache dir (NVRTC cold compile) | %.1f |\n| warm disk cache | %.1f |\n",
              cold_ms, warm_ms);

  if (!json_path.empty()) {
    // Built by nlohmann::json: the device name is escaped, NaN (no unfused figure) is null.
    nlohmann::ordered_json rows_json = nlohmann::ordered_json::array();
    for (const bench::SiluCudaRow& r : rows)
      rows_json.push_back({{"dtype", r.dtype}, {"pass", r.pass}, {"log2n", r.log2n}, {"ms", r.ms},
                           {"gbps", r.gbps}, {"pct_copy", r.pct_copy}, {"copy_ms", r.copy_ms},
                           {"unfused_ms", r.unfused_ms}, {"speedup_unfused", r.speedup},
                           {"op_ms", r.op_ms}, {"user_pointwise_ms", r.user_pointwise_ms},
                           {"user_raw_ms", r.user_raw_ms}});
    const nlohmann::ordered_json doc = {
        {"device", props.name},
        {"rows", rows_json},
        {"host_us",
         {{"silu", us_silu},
          {"silu_backward", us_bwd},
          {"silu_requires_grad", us_grad},
          {"raw_launch", us_launch},
          {"bare_culaunchkernel", us_bare}}},
        {"jit_ms", {{"cold", cold_ms}, {"warm_disk", warm_ms}}}};
    const std::string j =
        doc.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
    FILE* f = std::fopen(json_path.c_str(), "w");
    if (f) {
      std::fputs(j.c_str(), f);
      std::fclose(f);
    }
  }
  return 0;
}
