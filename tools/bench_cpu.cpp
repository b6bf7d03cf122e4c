// bench_cpu: times the CPU kernels on this machine.
//  - SiLU forward (8 bytes/element moved) and the fused backward (12 bytes/element)
//    on float32 from 2^12 to 2^26 elements, against a memcpy of the same bytes
//    measured in the same run on the same threads;
//  - matmul GFLOP/s on square float32 products, through cblas and the blocked kernel;
// each with 1 and 2 threads. Median of repeats; plain text, or --json.
// Usage: bench_cpu [--json] [--max-log2 N] [--threads a,b,...]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/loops.h"
#include "minitensor.h"

namespace {

using Clock = std::chrono::steady_clock;

// Median seconds of f over repeats: at least 5, more until ~0.25 s have passed.
template <typename F>
double median_seconds(F&& f) {
  f();  // warm-up: faults in the pages, wakes the threads
  std::vector<double> times;
  auto begin = Clock::now();
  while (times.size() < 5 || (std::chrono::duration<double>(Clock::now() - begin).count() < 0.25 &&
                              times.size() < 1000)) {
    auto t0 = Clock::now();
    f();
    times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  return times[times.size() / 2];
}

// memcpy of nbytes, cut into one piece per thread like the kernels' loops.
void parallel_copy(char* dst, const char* src, int64_t nbytes) {
  mt::cpu::parallel_for(nbytes, 4 * mt::cpu::kGrainSize, [&](int64_t b, int64_t e) {
    std::memcpy(dst + b, src + b, size_t(e - b));
  });
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

struct Row {
  std::string op;
  int threads;
  int64_t n;
  double seconds, gbps, copy_gbps;
};

}  // namespace

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
  using mt::Tensor;
  const int64_t max_n = int64_t(1) << max_log2;
  // Buffers for the largest size; smaller sizes use their fronts.
  Tensor x = mt::empty({max_n}), g = mt::empty({max_n}), y = mt::empty({max_n});
  {
    float* px = x.data_ptr<float>();
    float* pg = g.data_ptr<float>();
    for (int64_t i = 0; i < max_n; ++i) px[i] = float(i % 2001) * 0.004f - 4.0f, pg[i] = 1.0f;
    std::memset(y.data_ptr(), 0, size_t(max_n) * 4);
  }
  std::vector<char> csrc(size_t(max_n) * 6, 1), cdst(size_t(max_n) * 6, 0);

  std::vector<Row> rows;
  for (int t : thread_counts) {
    mt::cpu::set_num_threads(t);
    for (int lg = 12; lg <= max_log2; lg += 2) {
      const int64_t n = int64_t(1) << lg;
      Tensor xs = x.narrow(0, 0, n), gs = g.narrow(0, 0, n), ys = y.narrow(0, 0, n);
      double fwd = median_seconds([&] { mt::cpu::unary(mt::cpu::UnaryOp::Silu, xs, ys); });
      double cf = median_seconds([&] { parallel_copy(cdst.data(), csrc.data(), n * 4); });
      double bwd = median_seconds([&] { mt::cpu::silu_backward(gs, xs, ys); });
      double cb = median_seconds([&] { parallel_copy(cdst.data(), csrc.data(), n * 6); });
      rows.push_back(
          {"silu_fwd", t, n, fwd, 8.0 * double(n) / fwd / 1e9, 8.0 * double(n) / cf / 1e9});
      rows.push_back(
          {"silu_bwd", t, n, bwd, 12.0 * double(n) / bwd / 1e9, 12.0 * double(n) / cb / 1e9});
    }
  }

  struct MmRow {
    int64_t size;
    bool blas;
    int threads;
    double seconds, gflops;
  };
  std::vector<MmRow> mm;
  for (int64_t s : {256, 512, 1024}) {
    Tensor a = mt::rand({s, s}), b = mt::rand({s, s}), c = mt::empty({s, s});
    for (bool blas : {true, false}) {
      mt::cpu::set_use_blas(blas);
      if (blas && !mt::cpu::have_blas()) continue;
      for (int t : thread_counts) {
        mt::cpu::set_num_threads(t);
        double sec = median_seconds([&] { mt::cpu::matmul(a, b, c); });
        mm.push_back({s, blas, t, sec, 2.0 * double(s * s * s) / sec / 1e9});
      }
    }
  }
  mt::cpu::set_use_blas(true);

  const std::string model = cpu_model();
  if (json) {
    std::printf("{\"cpu\": \"%s\", \"silu\": [", model.c_str());
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
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
          i ? "," : "", (long long)mm[i].size, mm[i].blas ? "blas" : "blocked", mm[i].threads,
          mm[i].seconds, mm[i].gflops);
    std::printf("]}\n");
    return 0;
  }
  std::printf("CPU: %s; kernels' threads as listed; cblas %s\n\n", model.c_str(),
              mt::cpu::have_blas() ? "available" : "not built in");
  std::printf("%-9s %7s %10s %12s %9s %10s %7s\n", "op", "threads", "elements", "median_us", "GB/s",
              "copy_GB/s", "ratio");
  for (const Row& r : rows)
    std::printf("%-9s %7d %10lld %12.1f %9.2f %10.2f %7.2f\n", r.op.c_str(), r.threads,
                (long long)r.n, r.seconds * 1e6, r.gbps, r.copy_gbps, r.gbps / r.copy_gbps);
  std::printf("\n%-8s %-8s %7s %10s %9s\n", "matmul", "path", "threads", "median_ms", "GFLOP/s");
  for (const MmRow& r : mm)
    std::printf("%-8lld %-8s %7d %10.2f %9.1f\n", (long long)r.size, r.blas ? "blas" : "blocked",
                r.threads, r.seconds * 1e3, r.gflops);
  return 0;
}
