// SPDX-License-Identifier: MIT
// bench_cpu: times the CPU kernels on this machine.
//  - SiLU forward (8 bytes/element moved) and the fused backward (12 bytes/element)
//    on float32 from 2^12 to 2^26 elements, against a memcpy of the same bytes
//    measured in the same run on the same threads;
//  - matmul GFLOP/s on square float32 products, through cblas and the blocked kernel;
// each with 1 and 2 threads. Median of repeats; plain text, or --json.
// Usage: bench_cpu [--json] [--max-log2 N] [--threads a,b,...]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/cpu/cpu_kernels.h"
#include "minitensor.h"
#include "tools/bench/matmul.h"
#include "tools/bench/silu.h"

int main(int argc, char** argv) {
  bool json = false;
  int max_log2 = 26;
  std::vector<int> thread_counts = {1, 2};
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--json") {
      json = true;
    } else if (a == "--max-log2" && i + 1 < argc) {
      max_log2 = std::max(12, std::atoi(argv[++i]));
    } else if (a == "--threads" && i + 1 < argc) {
      thread_counts.clear();
      for (const char* p = argv[++i]; *p;) {
        thread_counts.push_back(std::max(1, std::atoi(p)));
        while (*p && *p != ',') ++p;
        if (*p) ++p;
      }
    } else {
      std::fprintf(stderr, "usage: bench_cpu [--json] [--max-log2 N] [--threads a,b,...]\n");
      return 2;
    }
  }
  mt::bench::Progress quiet;
  const std::vector<mt::bench::SiluCpuRow> rows =
      mt::bench::silu_cpu_sweep(12, max_log2, thread_counts, quiet);
  const std::vector<mt::bench::MatmulRow> mm =
      mt::bench::matmul_cpu_sweep({256, 512, 1024}, thread_counts, false, quiet);

  const std::string model = mt::bench::cpu_model();
  if (json) {
    // Built by nlohmann::json, so the CPU model is escaped; NaN prints as null.
    nlohmann::ordered_json j = {{"cpu", model}, {"silu", nlohmann::ordered_json::array()},
                                {"matmul", nlohmann::ordered_json::array()}};
    for (const mt::bench::SiluCpuRow& r : rows)
      j["silu"].push_back({{"op", r.op}, {"threads", r.threads}, {"n", r.n}, {"seconds", r.seconds},
                           {"gbps", r.gbps}, {"copy_gbps", r.copy_gbps},
                           {"ratio", r.gbps / r.copy_gbps}});
    for (const mt::bench::MatmulRow& r : mm)
      j["matmul"].push_back({{"size", r.size}, {"path", r.path}, {"threads", r.threads},
                             {"seconds", r.seconds}, {"gflops", r.gflops}});
    std::printf("%s\n",
                j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace).c_str());
    return 0;
  }
  std::printf("CPU: %s; kernels' threads as listed; cblas %s\n\n", model.c_str(),
              mt::cpu::have_blas() ? "available" : "not built in");
  std::printf("%-9s %7s %10s %12s %9s %10s %7s\n", "op", "threads", "elements", "median_us", "GB/s",
              "copy_GB/s", "ratio");
  for (const mt::bench::SiluCpuRow& r : rows)
    std::printf("%-9s %7d %10lld %12.1f %9.2f %10.2f %7.2f\n", r.op.c_str(), r.threads,
                (long long)r.n, r.seconds * 1e6, r.gbps, r.copy_gbps, r.gbps / r.copy_gbps);
  std::printf("\n%-8s %-8s %7s %10s %9s\n", "matmul", "path", "threads", "median_ms", "GFLOP/s");
  for (const mt::bench::MatmulRow& r : mm)
    std::printf("%-8lld %-8s %7d %10.2f %9.1f\n", (long long)r.size, r.path.c_str(),
                r.threads, r.seconds * 1e3, r.gflops);
  return 0;
}
