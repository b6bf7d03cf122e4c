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
    std::printf("{\"cpu\": \"%s\", \"silu\": [", model.c_str());
    for (size_t i = 0; i < rows.size(); ++i) {
      const mt::bench::SiluCpuRow& r = rows[i];
      std::printf(
          "%s\n  {\"op\": \"%s\", \"threads\": %d, \"n\": %lld, \"seconds\": %.9f, "
          "\"gbps\": %.3f, \"copy_gbps\": %.3f, \"ratio\": %.3f}",
          i ? "," : "", r.op.c_str(), r.threads, (long long)r.n, r.seconds, r.gbps, r.copy_gbps,
          r.gbps / r.copy_gbps);
    }
    std::printf("],\n\"matmul\": [");
    for (size_t i = 0; i < mm.size(); ++i)
      std::printf(
          "%s\n  {\"size\": %lld, \"path\": \"%s\", \"threads\": %d, \"seconds\": %.9f, "
          "\"gflops\": %.3f}",
          i ? "," : "", (long long)mm[i].size, mm[i].path.c_str(), mm[i].threads,
          mm[i].seconds, mm[i].gflops);
    std::printf("]}\n");
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
