// SPDX-License-Identifier: MIT
#include "tools/bench/silu.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/vec_exp.h"
#include "kernels/ops/silu/silu.h"  // cpu::silu_backward, and the CUDA launchers

#ifdef MT_HAVE_CUDA
#include "kernels/jit/builtin.h"
#include "kernels/jit/kernel.h"
#include "kernels/jit/module.h"
#include "kernels/jit/pointwise.h"
#include "kernels/ops.h"
#include "runtime/cuda/driver.h"
#endif

namespace mt::bench {

std::vector<SiluCpuRow> silu_cpu_sweep(int min_log2, int max_log2, const std::vector<int>& threads,
                                       Progress& progress, double min_seconds) {
  const int64_t max_n = int64_t(1) << max_log2;
  // Buffers for the largest size; smaller sizes use their fronts.
  Tensor x = empty({max_n}), g = empty({max_n}), y = empty({max_n});
  {
    float* px = x.data_ptr<float>();
    float* pg = g.data_ptr<float>();
    for (int64_t i = 0; i < max_n; ++i) px[i] = float(i % 2001) * 0.004f - 4.0f, pg[i] = 1.0f;
    std::memset(y.data_ptr(), 0, size_t(max_n) * 4);
  }
  std::vector<char> csrc(size_t(max_n) * 6, 1), cdst(size_t(max_n) * 6, 0);

  std::vector<SiluCpuRow> rows;
  for (int t : threads) {
    cpu::set_num_threads(t);
    for (int lg = min_log2; lg <= max_log2; lg += 2) {
      progress.step(fmt::format("{} thread(s), 2^{}", t, lg));
      const int64_t n = int64_t(1) << lg;
      Tensor xs = x.narrow(0, 0, n), gs = g.narrow(0, 0, n), ys = y.narrow(0, 0, n);
      auto fwd_pass = [&] { cpu::unary(cpu::UnaryOp::Silu, xs, ys); };
      auto bwd_pass = [&] { cpu::silu_backward(gs, xs, ys); };
      // The portable loops, timed in between (the A/B of kernels/cpu/vec_exp.h).
      auto portable = [&](auto pass) {
        if (!cpu::vec_exp_active()) return std::nan("");
        cpu::set_vec_exp_enabled(false);
        const double s = cpu_median_seconds(pass, 5, min_seconds);
        cpu::set_vec_exp_enabled(true);
        return s;
      };
      double fwd = cpu_median_seconds(fwd_pass, 5, min_seconds);
      double cf = cpu_median_seconds([&] { parallel_copy(cdst.data(), csrc.data(), n * 4); }, 5,
                                     min_seconds);
      double fwd_portable = portable(fwd_pass);
      double bwd = cpu_median_seconds(bwd_pass, 5, min_seconds);
      double cb = cpu_median_seconds([&] { parallel_copy(cdst.data(), csrc.data(), n * 6); }, 5,
                                     min_seconds);
      double bwd_portable = portable(bwd_pass);
      const double dn = double(n);
      rows.push_back(
          {"silu_fwd", t, n, fwd, 8 * dn / fwd / 1e9, cf, 8 * dn / cf / 1e9, fwd_portable});
      rows.push_back(
          {"silu_bwd", t, n, bwd, 12 * dn / bwd / 1e9, cb, 12 * dn / cb / 1e9, bwd_portable});
    }
  }
  return rows;
}

#ifdef MT_HAVE_CUDA

namespace {

// The unfused baseline: a user's source string JIT-compiled like any other kernel.
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

// SiLU as a user writes it: one expression each way (mt::jit::pointwise), and plain
// grid-stride kernels launched with typed arguments.
const jit::Pointwise& user_silu_pointwise() {
  static const jit::Pointwise f = jit::pointwise("user_silu", "x / (1.0f + expf(-x))");
  return f;
}
const jit::Pointwise& user_silu_bwd_pointwise() {
  static const jit::Pointwise f = jit::pointwise(
      {.name = "user_silu_bwd",
       .inputs = {"g", "x"},
       .body = "float s = 1.0f / (1.0f + expf(-x)); return g * s * (1.0f + x * (1.0f - s));"});
  return f;
}
const char* kUserRawSource = R"(
template <typename T>
__global__ void user_silu_raw(const T* x, T* y, long long n) {
  for (long long i = mt::global_thread_index(); i < n; i += mt::grid_stride()) {
    const float v = mt::load_compute(x[i]);
    y[i] = mt::store_compute<T>(v / (1.0f + expf(-v)));
  }
}
template <typename T>
__global__ void user_silu_bwd_raw(const T* g, const T* x, T* out, long long n) {
  for (long long i = mt::global_thread_index(); i < n; i += mt::grid_stride()) {
    const float v = mt::load_compute(x[i]);
    const float s = 1.0f / (1.0f + expf(-v));
    out[i] = mt::store_compute<T>(mt::load_compute(g[i]) * s * (1.0f + v * (1.0f - s)));
  }
}
)";

const jit::Kernel& user_kernel(int device, const std::string& name, DType t) {
  jit::KernelSpec spec{.name = "bench_unfused.cu", .source = kUnfusedSource};
  return jit::get_kernel(device, spec, fmt::format("{}<{}>", name, jit::kernel_type_name(t)));
}

}  // namespace

std::vector<SiluCudaRow> silu_cuda_sweep(int device, const std::vector<DType>& dtypes, int min_log2,
                                         int max_log2, const CudaTiming& timing,
                                         Progress& progress) {
  check_device(Device(DeviceType::CUDA, device), "bench silu");
  const Device gpu(DeviceType::CUDA, device);
  const auto& props = cuda::device_props(device);
  CUstream stream = cuda::current_stream(device);
  const auto& drv = cuda::driver();
  std::vector<SiluCudaRow> rows;
  for (DType t : dtypes) {
    const size_t es = dtype_size(t);
    const jit::Kernel *k_sig = nullptr, *k_mul = nullptr, *k_gs = nullptr;
    try {
      k_sig = &user_kernel(device, "sigmoid_k", t);
      k_mul = &user_kernel(device, "mul_k", t);
      k_gs = &user_kernel(device, "silu_grad_from_s_k", t);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "unfused baseline unavailable for %s: %s\n", dtype_name(t).data(),
                   e.what());
      k_sig = nullptr;
    }
    const std::string ty(jit::kernel_type_name(t));
    const jit::UserKernel raw_fwd = jit::kernel(kUserRawSource, "user_silu_raw<" + ty + ">");
    const jit::UserKernel raw_bwd = jit::kernel(kUserRawSource, "user_silu_bwd_raw<" + ty + ">");
    for (int lg = min_log2; lg <= max_log2; lg += 2) {
      progress.step(fmt::format("{} 2^{}", dtype_name(t), lg));
      long long n = 1LL << lg;
      // Random values (randn of at most 2^20 on the host), tiled on the device.
      auto tiled = [&](uint64_t seed) {
        Generator gen(seed);
        const long long chunk = std::min(n, 1LL << 20);
        Tensor base = randn({chunk}, {}, &gen).to(t).to(gpu);
        Tensor out = empty({n}, {.dtype = t, .device = gpu});
        for (long long off = 0; off < n; off += chunk)
          MT_CU_CHECK(drv.cuMemcpyDtoDAsync(
              reinterpret_cast<CUdeviceptr>(static_cast<char*>(out.data_ptr()) + off * es),
              reinterpret_cast<CUdeviceptr>(base.data_ptr()), size_t(chunk) * es, stream));
        cuda::synchronize(device);
        return out;
      };
      Tensor x = tiled(1), g = tiled(2);
      Tensor y = empty({n}, {.dtype = t, .device = gpu}), s = empty_like(y);
      Tensor cpy = empty({3 * n}, {.dtype = t, .device = gpu}), cpy2 = empty_like(cpy);
      void *px = x.data_ptr(), *pg = g.data_ptr(), *py = y.data_ptr(), *ps = s.data_ptr();
      auto shape = jit::elementwise_launch_shape(n, props.sm_count);
      for (int pass = 0; pass < 2; ++pass) {
        const bool fwd = pass == 0;
        const size_t bytes = size_t(n) * es * (fwd ? 2 : 3);
        double ms = cuda_median_ms(device, timing, [&] {
          if (fwd)
            gpu::launch_silu_fwd(device, stream, t, px, py, n);
          else
            gpu::launch_silu_bwd(device, stream, t, pg, px, py, n);
        });
        double unf = !k_sig ? std::nan("") : cuda_median_ms(device, timing, [&] {
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
        double copy_ms = cuda_median_ms(device, timing, [&] {
          MT_CU_CHECK(drv.cuMemcpyDtoDAsync(reinterpret_cast<CUdeviceptr>(cpy2.data_ptr()),
                                            reinterpret_cast<CUdeviceptr>(cpy.data_ptr()),
                                            bytes / 2, stream));
        });
        const double op_ms = cuda_median_ms(device, timing, [&] {
          if (fwd)
            silu(x);
          else
            silu_backward(g, x);
        });
        const double pw_ms = cuda_median_ms(device, timing, [&] {
          if (fwd)
            user_silu_pointwise()(x);
          else
            user_silu_bwd_pointwise()(g, x);
        });
        const jit::LaunchConfig cfg{.grid = jit::grid_stride_for(n, device)};
        const double raw_ms = cuda_median_ms(device, timing, [&] {
          if (fwd)
            raw_fwd.launch(cfg, x, y, n);
          else
            raw_bwd.launch(cfg, g, x, y, n);
        });
        rows.push_back({std::string(dtype_name(t)), fwd ? "fwd" : "bwd", lg, ms,
                        double(bytes) / ms / 1e6, 100.0 * copy_ms / ms, copy_ms, unf, unf / ms,
                        op_ms, pw_ms, raw_ms});
      }
    }
  }
  return rows;
}

#else

std::vector<SiluCudaRow> silu_cuda_sweep(int device, const std::vector<DType>&, int, int,
                                         const CudaTiming&, Progress&) {
  check_device(Device(DeviceType::CUDA, device), "bench silu");
  MT_ERROR("[bench silu] {}", cuda::unavailable_reason());
}

#endif

}  // namespace mt::bench
