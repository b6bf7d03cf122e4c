// SPDX-License-Identifier: MIT
// `minitensor doctor`: the build, the CPU, CUDA, NVRTC, the kernel cache, a SiLU check.
#include <cstdio>
#include <thread>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/jit/cache.h"
#include "kernels/jit/nvrtc.h"
#include "tools/cli/cli.h"

namespace mt::cli {
namespace {

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
  kv.push_back(
      {"cpu", "cpu",
       fmt::format("{} ({} hardware threads)", cpu_model(), std::thread::hardware_concurrency())});
  kv.push_back({"blas", "blas", cpu::blas_info()});
  kv.push_back({"cpu_threads", "cpu threads", std::to_string(cpu::num_threads())});
  bool cuda_ok = cuda::is_available();
  kv.push_back({"cuda_driver", "cuda driver",
                cuda_ok ? fmt::format("found, {} device(s), driver {}", cuda::device_count(),
                                      cuda::driver_version())
                        : "unavailable: " + cuda::unavailable_reason()});
  for (int i = 0; cuda_ok && i < cuda::device_count(); ++i) {
    const auto& p = cuda::device_props(i);
    kv.push_back({fmt::format("cuda_{}", i), fmt::format("cuda:{}", i),
                  fmt::format("{}, sm_{}{}, {} SMs, {:.1f} GiB", p.name, p.major, p.minor,
                              p.sm_count, double(p.total_memory) / (1 << 30))});
  }
  if (jit::nvrtc_available()) {
    jit::NvrtcVersion v = jit::nvrtc_version();
    std::vector<std::string> archs;
    for (int a : jit::nvrtc_supported_archs()) archs.push_back(fmt::format("sm_{}", a));
    kv.push_back({"nvrtc", "nvrtc",
                  fmt::format("{}.{} at {}; archs {}", v.major, v.minor, jit::nvrtc_library_path(),
                              fmt::join(archs, " "))});
  } else {
    kv.push_back({"nvrtc", "nvrtc", "unavailable: " + jit::nvrtc_unavailable_reason()});
  }
  try {
    auto& cache = jit::kernel_cache();
    kv.push_back({"kernel_cache", "kernel cache",
                  cache.disk_enabled()
                      ? fmt::format("{} ({} entries, {:.1f} MiB of {} MiB)", cache.config().dir,
                                    cache.list().size(), double(cache.disk_bytes()) / (1 << 20),
                                    cache.config().max_bytes >> 20)
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
      kv.push_back({fmt::format("silu_cuda_{}", i), fmt::format("silu on cuda:{}", i),
                    std::string("error: ") + e.what()});
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

}  // namespace

void add_doctor(CLI::App& app, Commands& commands) {
  auto [doc, json] = commands.add<bool>(
      app, "doctor", "the build, the CPU, CUDA, NVRTC, the kernel cache, a SiLU check", doctor);
  doc->add_flag("--json", *json, "machine-readable output");
}

}  // namespace mt::cli
