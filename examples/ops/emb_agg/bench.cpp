// SPDX-License-Identifier: MIT
// Times deeprec::emb_agg on cuda:0 (mode sum, bags of a fixed size with random rows) at the
// issue's two shapes: V=1e6 D=128 4096 bags of 50, and V=1e5 D=64 65536 bags of 20, with
// float32 and bfloat16 weights. Forward; backward (grad_weight, dense, which includes
// writing all of the [V, D] gradient: the atomic path zero-fills it first, the
// deterministic sorted-segment path writes every row once; timed as forward + backward
// less the forward); and the same with deterministic=true (bfloat16 always takes it).
// Medians of CUDA events, beside a gather floor (a device copy moving as many bytes, read
// + write, as the rows the forward must read, bags x bag x D values) and a fill floor (a
// zero-fill of the [V, D] gradient, which any dense backward writes).
//   build/examples/ops/emb_agg/emb_agg_bench [--json] [--stages]
// --stages adds, for float32, the deterministic path's kernels one by one (ms each; in
// the JSON, a "stages" list of [kernel, ms] in the float32 rows).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "bench_timing.h"
#include "emb_agg.h"

using namespace mt;
using ops_bench::median_ms;

namespace {

struct Shape4 {
  int64_t V, D, bags, bag;
};

}  // namespace

int main(int argc, char** argv) {
  bool json = false, stages = false;
  for (int i = 1; i < argc; ++i) {
    json = json || std::strcmp(argv[i], "--json") == 0;
    stages = stages || std::strcmp(argv[i], "--stages") == 0;
  }
  if (!cuda::is_available()) {
    std::printf("emb_agg bench: no GPU (%s); nothing timed\n", cuda::unavailable_reason().c_str());
    return 0;
  }
  const Device gpu("cuda:0");
  const Shape4 shapes[] = {{1000000, 128, 4096, 50}, {100000, 64, 65536, 20}};
  if (json)
    std::printf("{\"device\": \"%s\", \"rows\": [", cuda::device_props(0).name.c_str());
  else
    std::printf(
        "deeprec::emb_agg on %s, mode sum, median ms of CUDA events\n"
        "| dtype | V | D | bags x bag | forward | gather floor | fwd/floor | backward | "
        "backward, deterministic | zero-fill of [V, D] |\n"
        "|---|---|---|---|---|---|---|---|---|---|\n",
        cuda::device_props(0).name.c_str());
  bool first = true;
  for (const Shape4& s : shapes)
    for (DType t : {DType::Float32, DType::BFloat16}) {
      manual_seed(1);
      Tensor w = randn({s.V, s.D}).to(t).to(gpu);
      // Random rows (a linear congruential generator on the host), fixed-size bags.
      std::vector<int64_t> rows(size_t(s.bags * s.bag)), starts(size_t(s.bags));
      uint64_t state = 12345;
      for (int64_t& r : rows) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        r = int64_t((state >> 33) % uint64_t(s.V));
      }
      for (int64_t b = 0; b < s.bags; ++b) starts[size_t(b)] = b * s.bag;
      Tensor idx = from_vector(rows, {s.bags * s.bag}, {.dtype = DType::Int64}).to(gpu);
      Tensor off = from_vector(starts, {s.bags}, {.dtype = DType::Int64}).to(gpu);
      const int64_t bytes = s.bags * s.bag * s.D * int64_t(dtype_size(t));
      Tensor floor_src = empty({bytes / 8}, {.device = gpu});  // float32: read + write = bytes
      Tensor floor_dst = empty_like(floor_src);
      const double fwd = median_ms([&] { deeprec::emb_agg(w, idx, off); }, 50);
      const double floor_ms = median_ms([&] { floor_dst.copy_(floor_src); }, 50);
      Tensor gw = empty({s.V, s.D}, {.dtype = t, .device = gpu});
      const double fill_ms = median_ms([&] { gw.zero_(); }, 20);
      gw = Tensor();
      Tensor wr = w.detach().requires_grad_();
      Tensor g = randn({s.bags, s.D}).to(t).to(gpu);
      auto bwd = [&](bool det) {
        return median_ms(
                   [&] {
                     Tensor y = deeprec::emb_agg(wr, idx, off, "sum", std::nullopt, false, det);
                     backward(y, g);
                     wr.set_grad(Tensor());
                   },
                   20) -
               fwd;
      };
      const double bwd_ms = bwd(false), det_ms = bwd(true);
      const char* name = t == DType::Float32 ? "float32" : "bfloat16";
      std::vector<std::pair<std::string, double>> profile;
      if (stages && t == DType::Float32) {
        deeprec::emb_agg_segment_profile(w, idx, off, g);  // compiles the kernels
        profile = deeprec::emb_agg_segment_profile(w, idx, off, g);
      }
      if (json) {
        std::printf(
            "%s{\"dtype\": \"%s\", \"V\": %lld, \"D\": %lld, \"bags\": %lld, \"bag\": %lld, "
            "\"fwd_ms\": %.6f, \"floor_ms\": %.6f, \"bwd_ms\": %.6f, \"bwd_det_ms\": %.6f, "
            "\"fill_ms\": %.6f, \"stages\": [",
            first ? "" : ", ", name, (long long)s.V, (long long)s.D, (long long)s.bags,
            (long long)s.bag, fwd, floor_ms, bwd_ms, det_ms, fill_ms);
        for (size_t i = 0; i < profile.size(); ++i)
          std::printf("%s[\"%s\", %.6f]", i ? ", " : "", profile[i].first.c_str(),
                      profile[i].second);
        std::printf("]}");
      } else {
        std::printf(
            "| %s | %lld | %lld | %lld x %lld | %.4f | %.4f | %.2f | %.4f | %.4f | %.4f |\n", name,
            (long long)s.V, (long long)s.D, (long long)s.bags, (long long)s.bag, fwd, floor_ms,
            fwd / floor_ms, bwd_ms, det_ms, fill_ms);
        double total = 0;
        for (const auto& [kernel, ms] : profile) {
          std::printf("    %-36s %.4f ms\n", kernel.c_str(), ms);
          total += ms;
        }
        if (!profile.empty()) std::printf("    %-36s %.4f ms\n", "(sum)", total);
      }
      first = false;
    }
  if (json) std::printf("]}\n");
  return 0;
}
