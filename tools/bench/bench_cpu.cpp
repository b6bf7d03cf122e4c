// SPDX-License-Identifier: MIT
// bench_cpu: times the CPU kernels on this machine.
//  - SiLU forward (8 bytes/element moved) and the fused backward (12 bytes/element)
//    on float32 from 2^12 to 2^26 elements, against a memcpy of the same bytes
//    measured in the same run on the same threads;
//  - exp, sigmoid and gelu on 2^16 float32 elements (in cache, on the last thread count): the
//    AVX-512 loops (kernels/cpu/vec_exp.h) against the portable ones, alternated;
//  - where the build found SLEEF (Debian's libsleef-dev) and the CPU has AVX-512: SiLU's
//    float32 loop against x / (1 + e^-x) with SLEEF's Sleef_expf16_u10, one thread, 2^16;
//    and where it has AVX2: the AVX2 exp and sigmoid loops against SLEEF's Sleef_expf8_u10avx2;
//  - matmul GFLOP/s on square float32 products, through cblas and the library's own kernel;
// each with 1 and 2 threads. Median of repeats; plain text, or --json.
// Usage: bench_cpu [--json] [--max-log2 N] [--matmul-max N] [--threads a,b,...]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/vec_exp.h"
#include "minitensor.h"
#include "tools/bench/matmul.h"
#include "tools/bench/silu.h"

#if MT_HAVE_SLEEF
// tools/bench/sleef_silu.cpp, compiled for AVX-512 (sleef.h declares the 512-bit functions only
// under -mavx512f); called only where the CPU has it.
void sleef_silu(float* o, const float* x, int64_t n);
// tools/bench/sleef_avx2.cpp, compiled for AVX2 and FMA; called only where the CPU has them.
void sleef_exp_avx2(float* o, const float* x, int64_t n);
void sleef_sigmoid_avx2(float* o, const float* x, int64_t n);
#endif

int main(int argc, char** argv) {
  bool json = false;
  int max_log2 = 26;
  int matmul_max = 1024;  // the largest square matmul (of 256, 512, 1024)
  std::vector<int> thread_counts = {1, 2};
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--json") {
      json = true;
    } else if (a == "--max-log2" && i + 1 < argc) {
      max_log2 = std::max(12, std::atoi(argv[++i]));
    } else if (a == "--matmul-max" && i + 1 < argc) {
      matmul_max = std::max(256, std::atoi(argv[++i]));
    } else if (a == "--threads" && i + 1 < argc) {
      thread_counts.clear();
      for (const char* p = argv[++i]; *p;) {
        thread_counts.push_back(std::max(1, std::atoi(p)));
        while (*p && *p != ',') ++p;
        if (*p) ++p;
      }
    } else {
      std::fprintf(
          stderr,
          "usage: bench_cpu [--json] [--max-log2 N] [--matmul-max N] [--threads a,b,...]\n");
      return 2;
    }
  }
  mt::bench::Progress quiet;
  const std::vector<mt::bench::SiluCpuRow> rows =
      mt::bench::silu_cpu_sweep(12, max_log2, thread_counts, quiet);
  std::vector<int64_t> sizes;
  for (int64_t n : {256, 512, 1024})
    if (n <= matmul_max) sizes.push_back(n);
  const std::vector<mt::bench::MatmulRow> mm =
      mt::bench::matmul_cpu_sweep(sizes, thread_counts, false, quiet);

  // The other exp-bound ops: the default loops (the widest the CPU has), the AVX2 ones
  // (nan where the CPU has no AVX2; exp and sigmoid have AVX2 loops, gelu runs the portable
  // one there) and the portable ones, alternated.
  struct UnaryRow {
    const char* op;
    double seconds, avx2_seconds, portable_seconds;
  };
  std::vector<UnaryRow> unary_rows;
  {
    const int64_t n = int64_t(1) << 16;
    mt::Tensor x = mt::mul(mt::randn({n}), 3.0), y = mt::empty({n});
    const mt::cpu::VecIsa widest = mt::cpu::vec_exp_widest();
    for (auto [name, op] :
         {std::pair{"exp", mt::cpu::UnaryOp::Exp}, std::pair{"sigmoid", mt::cpu::UnaryOp::Sigmoid},
          std::pair{"gelu", mt::cpu::UnaryOp::Gelu}}) {
      auto pass = [&] { mt::cpu::unary(op, x, y); };
      auto capped = [&](mt::cpu::VecIsa cap) {
        if (int(cap) > int(widest)) return std::nan("");
        const mt::cpu::VecIsa had = mt::cpu::set_vec_exp_isa(cap);
        const double t = mt::bench::cpu_median_seconds(pass);
        mt::cpu::set_vec_exp_isa(had);
        return t;
      };
      const double s = mt::bench::cpu_median_seconds(pass);
      const double a = capped(mt::cpu::VecIsa::Avx2);
      const double p =
          widest != mt::cpu::VecIsa::Portable ? capped(mt::cpu::VecIsa::Portable) : std::nan("");
      unary_rows.push_back({name, s, a, p});
    }
  }

  // SiLU's own loop against SLEEF's exp, one thread, the raw loops on the same 2^16 floats,
  // alternated three times; NaN where there is no SLEEF or no AVX-512.
  double sleef_us = std::nan(""), own_us = std::nan("");
#if MT_HAVE_SLEEF
  if (mt::cpu::vec_exp_active()) {
    const int64_t n = int64_t(1) << 16;
    std::vector<float> x(size_t(n), 0.0f), y(size_t(n), 0.0f);
    for (int64_t i = 0; i < n; ++i) x[size_t(i)] = float(i % 2001) * 0.004f - 4.0f;
    std::vector<double> a, b;
    for (int k = 0; k < 3; ++k) {
      a.push_back(
          mt::bench::cpu_median_seconds([&] { mt::cpu::silu_f32_loop(y.data(), x.data(), n); }));
      b.push_back(mt::bench::cpu_median_seconds([&] { sleef_silu(y.data(), x.data(), n); }));
    }
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    own_us = a[1] * 1e6;
    sleef_us = b[1] * 1e6;
  }
#endif

  const std::string model = mt::bench::cpu_model();
  if (json) {
    // Built by nlohmann::json, so the CPU model is escaped; NaN prints as null.
    nlohmann::ordered_json j = {{"cpu", model},
                                {"silu", nlohmann::ordered_json::array()},
                                {"unary", nlohmann::ordered_json::array()},
                                {"matmul", nlohmann::ordered_json::array()}};
    j["sleef_silu"] = {{"n", 65536},
                       {"threads", 1},
                       {"seconds", own_us * 1e-6},
                       {"sleef_seconds", sleef_us * 1e-6}};
    for (const mt::bench::SiluCpuRow& r : rows)
      j["silu"].push_back({{"op", r.op},
                           {"threads", r.threads},
                           {"n", r.n},
                           {"seconds", r.seconds},
                           {"gbps", r.gbps},
                           {"copy_gbps", r.copy_gbps},
                           {"ratio", r.gbps / r.copy_gbps},
                           {"portable_seconds", r.portable_seconds},
                           {"portable_ratio", r.copy_seconds / r.portable_seconds}});
    for (const UnaryRow& r : unary_rows)
      j["unary"].push_back({{"op", r.op},
                            {"n", 65536},
                            {"seconds", r.seconds},
                            {"avx2_seconds", r.avx2_seconds},
                            {"portable_seconds", r.portable_seconds}});
    for (const mt::bench::MatmulRow& r : mm)
      j["matmul"].push_back({{"size", r.size},
                             {"path", r.path},
                             {"threads", r.threads},
                             {"seconds", r.seconds},
                             {"gflops", r.gflops}});
    std::printf("%s\n",
                j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace).c_str());
    return 0;
  }
  std::printf("CPU: %s; kernels' threads as listed; cblas %s\n\n", model.c_str(),
              mt::cpu::have_blas() ? "available" : "not built in");
  // portable: the loop of kernels/cpu/math.h, timed in the same sweep where the AVX-512 one
  // (kernels/cpu/vec_exp.h) is the default; nan where the CPU has no AVX-512.
  std::printf("%-9s %7s %10s %12s %9s %10s %7s %12s %9s\n", "op", "threads", "elements",
              "median_us", "GB/s", "copy_GB/s", "ratio", "portable_us", "p_ratio");
  for (const mt::bench::SiluCpuRow& r : rows)
    std::printf("%-9s %7d %10lld %12.1f %9.2f %10.2f %7.2f %12.1f %9.2f\n", r.op.c_str(), r.threads,
                (long long)r.n, r.seconds * 1e6, r.gbps, r.copy_gbps, r.gbps / r.copy_gbps,
                r.portable_seconds * 1e6, r.copy_seconds / r.portable_seconds);
  std::printf("\n%-9s %10s %12s %9s %12s %9s\n", "op", "elements", "median_us", "avx2_us",
              "portable_us", "speedup");
  for (const UnaryRow& r : unary_rows)
    std::printf("%-9s %10d %12.1f %9.1f %12.1f %9.2f\n", r.op, 65536, r.seconds * 1e6,
                r.avx2_seconds * 1e6, r.portable_seconds * 1e6, r.portable_seconds / r.seconds);
  if (!std::isnan(sleef_us))
    std::printf(
        "\nsilu, 1 thread, 65536 floats: %.1f us; with SLEEF's Sleef_expf16_u10 and a "
        "division: %.1f us (%.2fx the time)\n",
        own_us, sleef_us, sleef_us / own_us);
#if MT_HAVE_SLEEF
  // The AVX2 exp and sigmoid loops against SLEEF's AVX2 exp, as a user would write them: the
  // raw loops on the same 2^16 floats, one thread, alternated three times.
  if (int(mt::cpu::vec_exp_widest()) >= int(mt::cpu::VecIsa::Avx2)) {
    const int64_t n = int64_t(1) << 16;
    std::vector<float> x(size_t(n), 0.0f), y(size_t(n), 0.0f);
    for (int64_t i = 0; i < n; ++i) x[size_t(i)] = float(i % 2001) * 0.01f - 10.0f;
    const mt::cpu::VecIsa had = mt::cpu::set_vec_exp_isa(mt::cpu::VecIsa::Avx2);
    using Loop = void (*)(float*, const float*, int64_t);
    const std::pair<const char*, std::pair<Loop, Loop>> pairs[] = {
        {"exp", {mt::cpu::exp_f32_loop, sleef_exp_avx2}},
        {"sigmoid", {mt::cpu::sigmoid_f32_loop, sleef_sigmoid_avx2}}};
    std::printf("\n%-9s %10s %12s %12s %9s\n", "avx2", "elements", "own_us", "sleef_us", "ratio");
    for (const auto& [name, loops] : pairs) {
      std::vector<double> a, b;
      for (int k = 0; k < 3; ++k) {
        a.push_back(mt::bench::cpu_median_seconds([&] { loops.first(y.data(), x.data(), n); }));
        b.push_back(mt::bench::cpu_median_seconds([&] { loops.second(y.data(), x.data(), n); }));
      }
      std::sort(a.begin(), a.end());
      std::sort(b.begin(), b.end());
      std::printf("%-9s %10lld %12.1f %12.1f %9.2f\n", name, (long long)n, a[1] * 1e6, b[1] * 1e6,
                  b[1] / a[1]);
    }
    mt::cpu::set_vec_exp_isa(had);
  }
#endif
  std::printf("\n%-8s %-8s %7s %10s %9s\n", "matmul", "path", "threads", "median_ms", "GFLOP/s");
  for (const mt::bench::MatmulRow& r : mm)
    std::printf("%-8lld %-8s %7d %10.2f %9.1f\n", (long long)r.size, r.path.c_str(), r.threads,
                r.seconds * 1e3, r.gflops);
  return 0;
}
