// SPDX-License-Identifier: MIT
// bench_silu: SiLU forward and fused backward on one CUDA device, timed like
// triton.testing.do_bench (CUDA events, warm-up, repeats, median, an L2 flush between
// repeats), next to a device-to-device copy of the same bytes (the bandwidth ceiling)
// and an unfused baseline (a sigmoid kernel, then a multiply kernel) JIT-compiled from a
// user source string. Also: host cost of one mt::silu call through the dispatcher, and
// NVRTC cold compile / warm-disk-cache first launch (measured in child processes with
// a fresh MT_KERNEL_CACHE directory).
//
//   bench_silu [--json FILE] [--repeats N] [--max-log2 K] [--host-only] [--loop CALLS]
// (--host-only: the host-cost table alone, Note [Host-cost rows]; --loop: CALLS of mt::silu
// back to back and nothing else, for a profiler.)
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kernels/jit/builtin.h"
#include "kernels/jit/module.h"
#include "kernels/ops/silu/silu.h"
#include "minitensor.h"
#include "runtime/cuda/cuda.h"
#include "runtime/cuda/driver.h"
#include "runtime/cuda/hooks.h"
#include "tools/bench/silu.h"

using namespace mt;
using Clock = std::chrono::steady_clock;

namespace {

const Device kGpu{DeviceType::CUDA, 0};
bench::CudaTiming g_timing;  // 5 warm-up runs, 50 repeats, L2 flushed before each

double us_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

// Note [Host-cost rows]
// Three ways to time a host call, all on 4096 float32 elements of cuda:0, each the median
// over rounds:
// - back to back: `calls` calls, then a synchronize, inside the timing. A launch that the
//   GPU cannot keep up with fills the driver's queue and then waits for a slot, so this is
//   the slower of the host's cost and the GPU's rate of kernels.
// - burst: a synchronize (the GPU idle, the queue empty), then 32 calls timed without
//   waiting for them: the host's enqueue cost alone, the queue never full.
// - part: a host-only step (nothing queued) in a loop of `calls`.
// The difference between the first two says whether ~4 us a launch is the driver on this
// host or the GPU's rate; the parts, subtracted from the op's rows, say what the
// dispatcher, the allocator and the launcher add.

// A row that throws prints why and reads nan; the others still run.
template <typename F>
double or_nan(F&& measure) {
  try {
    return measure();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_silu: a host-cost row failed: %s\n", e.what());
    return std::nan("");
  }
}

template <typename F>
double steady_us(F&& fn, int calls = 4000, int rounds = 5) {
  return or_nan([&] {
    for (int i = 0; i < 200; ++i) fn();
    cuda::synchronize(0);
    std::vector<double> v;
    for (int r = 0; r < rounds; ++r) {
      const auto t0 = Clock::now();
      for (int i = 0; i < calls; ++i) fn();
      cuda::synchronize(0);
      v.push_back(us_since(t0) / calls);
    }
    return bench::median(std::move(v));
  });
}

constexpr int kBurst = 32;

template <typename F>
double burst_us(F&& fn, int rounds = 301) {
  return or_nan([&] {
    for (int i = 0; i < 200; ++i) fn();
    std::vector<double> v;
    for (int r = 0; r < rounds; ++r) {
      cuda::synchronize(0);
      const auto t0 = Clock::now();
      for (int i = 0; i < kBurst; ++i) fn();
      v.push_back(us_since(t0) / kBurst);
    }
    cuda::synchronize(0);
    return bench::median(std::move(v));
  });
}

template <typename F>
double part_us(F&& fn, int calls = 100000, int rounds = 5) {
  return or_nan([&] {
    for (int i = 0; i < 1000; ++i) fn();
    std::vector<double> v;
    for (int r = 0; r < rounds; ++r) {
      const auto t0 = Clock::now();
      for (int i = 0; i < calls; ++i) fn();
      v.push_back(us_since(t0) / calls);
    }
    cuda::synchronize(0);
    return bench::median(std::move(v));
  });
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

struct HostRow {
  const char* key;
  const char* what;
  double steady = std::nan(""), burst = std::nan("");  // us a call
};
struct HostPart {
  const char* key;
  const char* what;
  double us;
};
struct HostCost {
  std::vector<HostRow> rows;
  std::vector<HostPart> parts;
  nlohmann::ordered_json json() const {
    nlohmann::ordered_json j = nlohmann::ordered_json::object();
    for (const HostRow& r : rows) {
      j[r.key] = r.steady;
      if (!std::isnan(r.burst)) j[std::string(r.key) + "_burst"] = r.burst;
    }
    for (const HostPart& p : parts) j[p.key] = p.us;
    return j;
  }
};

// The host-cost table (Note [Host-cost rows]), one process, one run.
HostCost measure_host_cost() {
  HostCost h;
  CUstream stream = cuda::current_stream(0);
  Tensor hx = ones({4096}, {.device = kGpu});
  Tensor hg = ones({4096}, {.device = kGpu});
  Tensor hxr = ones({4096}, {.device = kGpu});
  hxr.requires_grad_();
  auto op_silu = [&] { Tensor y = silu(hx); };
  auto op_grad = [&] { Tensor y = silu(hxr); };
  auto raw = [&] {
    gpu::launch_silu_fwd(0, stream, DType::Float32, hx.data_ptr(), hg.data_ptr(), 4096);
  };
  h.rows.push_back(
      {"silu", "mt::silu through the dispatcher", steady_us(op_silu), burst_us(op_silu)});
  h.rows.push_back({"silu_backward", "mt::silu_backward through the dispatcher",
                    steady_us([&] { Tensor y = silu_backward(hg, hx); })});
  h.rows.push_back({"silu_requires_grad", "mt::silu, input requires grad", steady_us(op_grad),
                    burst_us(op_grad)});
  h.rows.push_back(
      {"raw_launch", "raw launch_silu_fwd, no dispatcher", steady_us(raw), burst_us(raw)});

  // The floor under the raw launch: cuLaunchKernel itself, of the kernel launch_silu_fwd
  // picks for these aligned pointers (silu_fwd_vec<float, 2>) with its grid, arguments
  // packed once, the context already current. The gap to the row above is what the
  // launcher adds (context check, stream lookup, argument packing, launch shape).
  const jit::Kernel& bare =
      jit::get_kernel(0, jit::builtin_spec("silu.cu"),
                      gpu::silu_name_expression(gpu::SiluKernel::FwdVec, DType::Float32));
  const jit::LaunchShape sh =
      jit::vec_launch_shape((4096 / 4 + gpu::kSiluUnroll - 1) / gpu::kSiluUnroll);
  const void* bare_x = hx.data_ptr();
  void* bare_y = hg.data_ptr();
  long long bare_n = 4096, zero_n = 0;
  void* bare_args[] = {&bare_x, &bare_y, &bare_n};
  void* zero_args[] = {&bare_x, &bare_y, &zero_n};
  const auto& drv = cuda::driver();
  CUstream nonblocking = nullptr;
  cuda::DeviceGuard guard(0);
  cuda::check(drv.cuStreamCreate(&nonblocking, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  auto bare_on = [&](CUstream s, void** args, unsigned grid) {
    return [&drv, &bare, &sh, s, args, grid] {
      cuda::check(
          drv.cuLaunchKernel(bare.function(), grid, 1, 1, sh.block.x, 1, 1, 0, s, args, nullptr),
          "cuLaunchKernel");
    };
  };
  auto bare_launch = bare_on(stream, bare_args, sh.grid.x);
  h.rows.push_back({"bare_culaunchkernel", "bare cuLaunchKernel of silu_fwd_vec<float, 2>",
                    steady_us(bare_launch), burst_us(bare_launch)});
  // The same, with nothing for the GPU to do (n = 0, one block): the GPU's own rate out of
  // the way.
  auto empty_launch = bare_on(stream, zero_args, 1);
  h.rows.push_back({"bare_empty_kernel", "bare cuLaunchKernel, n = 0, one block",
                    steady_us(empty_launch), burst_us(empty_launch)});
  // minitensor's own stream is blocking (ordered with the legacy default stream, where
  // PyTorch launches by default). The same launch on a non-blocking stream and on the legacy
  // stream, each made current so that the loops' synchronize waits on it; and mt::silu with
  // the non-blocking stream current.
  auto bare_row_on = [&](CUstream s, const char* key, const char* what) {
    cuda::StreamGuard sg(0, s);
    auto f = bare_on(s, bare_args, sh.grid.x);
    h.rows.push_back({key, what, steady_us(f), burst_us(f)});
  };
  bare_row_on(nonblocking, "bare_nonblocking_stream", "bare cuLaunchKernel, a non-blocking stream");
  bare_row_on(CU_STREAM_LEGACY, "bare_legacy_stream",
              "bare cuLaunchKernel, the legacy default stream");
  {
    cuda::StreamGuard sg(0, nonblocking);
    h.rows.push_back({"silu_nonblocking_stream", "mt::silu, a non-blocking stream current",
                      steady_us(op_silu), burst_us(op_silu)});
  }
  cuda::check(drv.cuCtxSynchronize(), "cuCtxSynchronize");

  // Host-only parts, nothing queued.
  CUcontext ctx = nullptr;
  h.parts.push_back({"cuctxgetcurrent", "cuCtxGetCurrent",
                     part_us([&] { cuda::check(drv.cuCtxGetCurrent(&ctx), "cuCtxGetCurrent"); })});
  h.parts.push_back({"device_guard", "cuda::DeviceGuard(0): primary context + cuCtxGetCurrent",
                     part_us([] { cuda::DeviceGuard g(0); })});
  h.parts.push_back({"current_stream", "cuda::current_stream(0)", part_us([] {
                       CUstream s = cuda::current_stream(0);
                       asm volatile("" : : "r"(s));
                     })});
  Allocator* alloc = cuda::caching_allocator(0);
  h.parts.push_back({"allocator_16k", "caching allocator, allocate + free of 16 KiB", part_us([&] {
                       void* p = alloc->allocate(16384);
                       alloc->deallocate(p, 16384);
                     })});
  h.parts.push_back({"empty", "mt::empty({4096}) on cuda:0, and its free",
                     part_us([] { Tensor t = empty({4096}, {.device = kGpu}); })});
  // Ops through the dispatcher and the custom-op wrapper whose CUDA kernels launch nothing:
  // one returns a tensor made before the loop (dispatch, key sets, the wrapper's checks and
  // the handle's copy alone), the other allocates its output as silu's does.
  Tensor made = empty({4096}, {.device = kGpu});
  auto no_alloc = custom_op("bench_silu::no_alloc", [](const Tensor& x) { return x.clone(); },
                            {.schema = "(Tensor self) -> Tensor"});
  no_alloc.register_kernel(DeviceType::CUDA, [&made](const Tensor&) { return made; });
  h.parts.push_back({"op_no_alloc", "an op whose CUDA kernel returns a tensor made before",
                     part_us([&] { Tensor y = no_alloc(hx); })});
  // An in-place op that writes nothing: dispatch and the wrapper's version bump.
  auto touch = custom_op("bench_silu::touch_", [](const Tensor&) {},
                         {.mutates_args = {"self"}, .schema = "(Tensor(a!) self) -> ()"});
  touch.register_kernel(DeviceType::CUDA, [](const Tensor&) {});
  h.parts.push_back({"op_inplace_no_launch", "an in-place op, CUDA kernel empty: its version bump",
                     part_us([&] { touch(hg); })});
  // The output allocated as silu's is, no launch.
  auto no_launch = custom_op("bench_silu::no_launch", [](const Tensor& x) { return empty_like(x); },
                             {.schema = "(Tensor self) -> Tensor"});
  no_launch.register_kernel(DeviceType::CUDA, [](const Tensor& x) { return empty_like(x); });
  h.parts.push_back({"op_no_launch", "an op whose CUDA kernel is empty_like(x), no launch",
                     part_us([&] { Tensor y = no_launch(hx); })});
  cuda::check(drv.cuStreamDestroy(nonblocking), "cuStreamDestroy");
  return h;
}

void print_host_cost(const HostCost& h) {
  std::printf(
      "\n| host cost, 4096 float32 on cuda:0 (Note [Host-cost rows]) | back to back "
      "us/call | burst of %d after a sync, us/call |\n|---|---|---|\n",
      kBurst);
  for (const HostRow& r : h.rows) {
    if (std::isnan(r.burst))
      std::printf("| %s | %.2f | - |\n", r.what, r.steady);
    else
      std::printf("| %s | %.2f | %.2f |\n", r.what, r.steady, r.burst);
  }
  std::printf("\n| host-only part (nothing queued) | ns/call |\n|---|---|\n");
  for (const HostPart& p : h.parts) std::printf("| %s | %.1f |\n", p.what, p.us * 1000);
}

void write_json(const std::string& path, const nlohmann::ordered_json& doc) {
  const std::string j =
      doc.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
  FILE* f = std::fopen(path.c_str(), "w");
  if (f) {
    std::fputs(j.c_str(), f);
    std::fclose(f);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string json_path;
  int max_log2 = 28;
  bool host_only = false;
  int loop_calls = 0;
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
    if (a == "--json" && i + 1 < argc)
      json_path = argv[++i];
    else if (a == "--repeats" && i + 1 < argc)
      g_timing.repeats = std::atoi(argv[++i]);
    else if (a == "--max-log2" && i + 1 < argc)
      max_log2 = std::atoi(argv[++i]);
    else if (a == "--host-only")
      host_only = true;
    else if (a == "--loop" && i + 1 < argc)
      loop_calls = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr,
                   "usage: bench_silu [--json FILE] [--repeats N] [--max-log2 K] [--host-only] "
                   "[--loop CALLS]\n");
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
  if (loop_calls > 0) {  // mt::silu back to back alone, for perf record / perf stat
    Tensor x = ones({4096}, {.device = kGpu});
    const double us = steady_us([&] { Tensor y = silu(x); }, loop_calls, 1);
    std::printf("mt::silu back to back, %d calls: %.2f us a call\n", loop_calls, us);
    return 0;
  }
  if (host_only) {
    const HostCost host = measure_host_cost();
    print_host_cost(host);
    if (!json_path.empty())
      write_json(json_path, {{"device", props.name}, {"host_us", host.json()}});
    return 0;
  }

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
  const HostCost host = measure_host_cost();

  std::printf(
      "\n| dtype | pass | n | ms | GB/s | %% of copy | copy ms | unfused ms | speedup vs unfused "
      "|\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  for (const bench::SiluCudaRow& r : rows)
    std::printf("| %s | %s | 2^%d | %.4f | %.0f | %.1f | %.4f | %.4f | %.2fx |\n", r.dtype.c_str(),
                r.pass.c_str(), r.log2n, r.ms, r.gbps, r.pct_copy, r.copy_ms, r.unfused_ms,
                r.speedup);
  std::printf(
      "\nA user's SiLU against mt::silu / mt::silu_backward called as ops (each allocates "
      "its output):\n");
  std::printf(
      "| dtype | pass | n | mt op ms | user pointwise ms | pointwise/op | user raw ms | "
      "raw/op |\n|---|---|---|---|---|---|---|---|\n");
  for (const bench::SiluCudaRow& r : rows)
    std::printf("| %s | %s | 2^%d | %.4f | %.4f | %.3fx | %.4f | %.3fx |\n", r.dtype.c_str(),
                r.pass.c_str(), r.log2n, r.op_ms, r.user_pointwise_ms,
                r.user_pointwise_ms / r.op_ms, r.user_raw_ms, r.user_raw_ms / r.op_ms);
  print_host_cost(host);
  std::printf("\n| JIT (fresh process, first mt::silu incl. launch+sync) | ms |\n|---|---|\n");
  std::printf("| empty cache dir (NVRTC cold compile) | %.1f |\n| warm disk cache | %.1f |\n",
              cold_ms, warm_ms);

  if (!json_path.empty()) {
    // Built by nlohmann::json: the device name is escaped, NaN (no unfused figure) is null.
    nlohmann::ordered_json rows_json = nlohmann::ordered_json::array();
    for (const bench::SiluCudaRow& r : rows)
      rows_json.push_back({{"dtype", r.dtype},
                           {"pass", r.pass},
                           {"log2n", r.log2n},
                           {"ms", r.ms},
                           {"gbps", r.gbps},
                           {"pct_copy", r.pct_copy},
                           {"copy_ms", r.copy_ms},
                           {"unfused_ms", r.unfused_ms},
                           {"speedup_unfused", r.speedup},
                           {"op_ms", r.op_ms},
                           {"user_pointwise_ms", r.user_pointwise_ms},
                           {"user_raw_ms", r.user_raw_ms}});
    const nlohmann::ordered_json doc = {{"device", props.name},
                                        {"rows", rows_json},
                                        {"host_us", host.json()},
                                        {"jit_ms", {{"cold", cold_ms}, {"warm_disk", warm_ms}}}};
    write_json(json_path, doc);
  }
  return 0;
}
