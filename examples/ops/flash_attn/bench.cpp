// SPDX-License-Identifier: MIT
// Times mha::flash_attn on cuda:0 (float16): the forward as an op call, the backward
// (dq, dk, dv from a given grad_out, the autograd formula's own call), medians of CUDA
// events, with TFLOP/s (forward 4 B H Sq Sk D, half that when causal; backward 2.5 times
// the forward's, as FlashAttention counts it). Shapes: the issue's, or --shapes.
//   build/examples/ops/flash_attn/flash_attn_bench [--json] [--dtype bfloat16]
//       [--shapes B,H,S,D,causal;...]
// --json prints one JSON object (tools/bench/compare_torch.py --attention). The fwd and bwd
// columns run what the autotuner chose (shown as "tuned fwd", "tuned bwd": the candidate and
// whether it was timed here or read from the file); the knobs force each candidate for the
// comparison columns. On a compute capability 9.0 GPU the wgmma forward (opt-in:
// MHA_FLASH_ATTN_FWD_KERNEL=sm90, Note [Hopper forward] in flash_attn.cu) is timed too, beside
// the mma.sync one ("sm90 fwd"; JSON fwd_sm90_ms, -1 elsewhere), and its serial form
// (MHA_FLASH_ATTN_FWD_KERNEL=sm90-serial; fwd_sm90_serial_ms).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench_timing.h"
#include "flash_attn.h"

using namespace mt;
using ops_bench::median_ms;

namespace {

struct Case {
  int64_t B, H, S, D;
  bool causal;
};
struct Row {
  Case c;
  double fwd_ms, bwd_ms, generic_fwd_ms, fwd1_ms = -1, bwd4_ms = -1, fwd2_ms = -1, bwd8_ms = -1,
                                         fwd_sm90_ms = -1, fwd_sm90_serial_ms = -1;
  std::string fwd_choice = {}, bwd_choice = {};  // the autotuner's: "fwd_row_tiles=2 (tuned)"
};

// What the autotuner took for this key on cuda:0, and why.
std::string choice_of(const std::string& key) {
  const auto c = jit::autotuner().choice(key, 0);
  return c ? fmt::format("{} ({})", c->name, jit::source_name(c->source)) : "-";
}

double fwd_flops(const Case& c) {
  return 4.0 * double(c.B * c.H) * double(c.S) * double(c.S) * double(c.D) * (c.causal ? 0.5 : 1);
}

std::vector<Case> parse_shapes(const char* s) {
  std::vector<Case> out;
  while (*s) {
    Case c{};
    long long b, h, sq, d;
    int causal = 0, n = 0;
    if (std::sscanf(s, "%lld,%lld,%lld,%lld,%d%n", &b, &h, &sq, &d, &causal, &n) < 5) break;
    c = {b, h, sq, d, causal != 0};
    out.push_back(c);
    s += n;
    if (*s == ';') ++s;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  bool json = false;
  DType dtype = DType::Float16;
  std::vector<Case> cases = {{4, 16, 1024, 64, false},
                             {4, 16, 4096, 64, false},
                             {4, 16, 4096, 64, true},
                             {1, 16, 16384, 128, true}};
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0) {
      json = true;
    } else if (std::strcmp(argv[i], "--dtype") == 0 && i + 1 < argc) {
      dtype = std::strcmp(argv[++i], "bfloat16") == 0 ? DType::BFloat16 : DType::Float16;
    } else if (std::strcmp(argv[i], "--shapes") == 0 && i + 1 < argc) {
      cases = parse_shapes(argv[++i]);
    } else {
      std::fprintf(stderr,
                   "usage: %s [--json] [--dtype float16|bfloat16] [--shapes B,H,S,D,causal;...]\n",
                   argv[0]);
      return 2;
    }
  }
  if (!cuda::is_available()) {
    std::printf("flash_attn bench: no GPU (%s); nothing timed\n",
                cuda::unavailable_reason().c_str());
    return 0;
  }
  const Device gpu("cuda:0");
  const auto& props = cuda::device_props(0);
  const bool hopper = props.major == 9 && props.minor == 0;
  std::vector<Row> rows;
  for (const Case& c : cases) {
    Tensor q = randn({c.B, c.H, c.S, c.D}).to(dtype).to(gpu);
    Tensor k = randn({c.B, c.H, c.S, c.D}).to(dtype).to(gpu);
    Tensor v = randn({c.B, c.H, c.S, c.D}).to(dtype).to(gpu);
    Tensor g = randn({c.B, c.H, c.S, c.D}).to(dtype).to(gpu);
    const int reps = c.S >= 8192 ? 10 : 30;
    Row r{c, 0, 0, -1};
    r.fwd_ms = median_ms([&] { mha::flash_attn(q, k, v, c.causal); }, reps);
    auto [out, lse] = mha::flash_attn(q, k, v, c.causal);
    r.bwd_ms = median_ms(
        [&] { mha::flash_attn_backward(g, Tensor(), q, k, v, out, lse, c.causal, std::nullopt); },
        reps);
    r.fwd_choice = choice_of(mha::flash_attn_tune_key(q, k, c.causal, false));
    r.bwd_choice = choice_of(mha::flash_attn_tune_key(q, k, c.causal, true));
    // Each candidate forced by its knob, for the comparison columns.
    auto forced_fwd = [&](const char* tiles) {
      setenv("MHA_FLASH_ATTN_FWD_ROW_TILES", tiles, 1);
      const double ms = median_ms([&] { mha::flash_attn(q, k, v, c.causal); }, reps);
      unsetenv("MHA_FLASH_ATTN_FWD_ROW_TILES");
      return ms;
    };
    auto forced_bwd = [&](const char* warps) {
      setenv("MHA_FLASH_ATTN_BWD_WARPS", warps, 1);
      const double ms = median_ms(
          [&] { mha::flash_attn_backward(g, Tensor(), q, k, v, out, lse, c.causal, std::nullopt); },
          reps);
      unsetenv("MHA_FLASH_ATTN_BWD_WARPS");
      return ms;
    };
    r.fwd2_ms = forced_fwd("2");
    r.fwd1_ms = forced_fwd("1");
    r.bwd8_ms = forced_bwd("8");
    r.bwd4_ms = forced_bwd("4");
    auto forced_kernel = [&](const char* kernel) {
      setenv("MHA_FLASH_ATTN_FWD_KERNEL", kernel, 1);
      const double ms = median_ms([&] { mha::flash_attn(q, k, v, c.causal); }, reps);
      unsetenv("MHA_FLASH_ATTN_FWD_KERNEL");
      return ms;
    };
    if (hopper) {
      r.fwd_sm90_ms = forced_kernel("sm90");
      r.fwd_sm90_serial_ms = forced_kernel("sm90-serial");
    }
    if (c.S <= 1024)  // a thread a row: slow, timed only where it is short
      r.generic_fwd_ms =
          median_ms([&] { mha::flash_attn_cuda(q, k, v, c.causal, std::nullopt, true); }, 5);
    rows.push_back(r);
  }
  // Registers a thread of the tensor-core kernels (what limits the blocks an SM runs).
  std::string regs;
  for (int64_t D : {64, 128}) {
    const mha::FlashAttnRegisters r = mha::flash_attn_registers(dtype, int(D));
    regs += fmt::format("{}\"D{}\": {{\"fwd\": {}, \"bwd\": {}, \"fwd_sm90\": {}}}",
                        regs.empty() ? "" : ", ", D, r.fwd, r.bwd, r.fwd_sm90);
  }
  if (json) {
    std::printf("{\"device\": \"%s\", \"dtype\": \"%s\", \"registers\": {%s}, \"rows\": [",
                props.name.c_str(), dtype == DType::Float16 ? "float16" : "bfloat16", regs.c_str());
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      std::printf(
          "%s{\"B\": %lld, \"H\": %lld, \"S\": %lld, \"D\": %lld, \"causal\": %s, "
          "\"fwd_ms\": %.6f, \"bwd_ms\": %.6f, \"generic_fwd_ms\": %.6f, "
          "\"fwd_two_row_tiles_ms\": %.6f, \"fwd_one_row_tile_ms\": %.6f, "
          "\"bwd_8_warps_ms\": %.6f, \"bwd_4_warps_ms\": %.6f, \"fwd_choice\": \"%s\", "
          "\"bwd_choice\": \"%s\", \"fwd_sm90_ms\": %.6f, \"fwd_sm90_serial_ms\": %.6f}",
          i ? ", " : "", (long long)r.c.B, (long long)r.c.H, (long long)r.c.S, (long long)r.c.D,
          r.c.causal ? "true" : "false", r.fwd_ms, r.bwd_ms, r.generic_fwd_ms, r.fwd2_ms, r.fwd1_ms,
          r.bwd8_ms, r.bwd4_ms, r.fwd_choice.c_str(), r.bwd_choice.c_str(), r.fwd_sm90_ms,
          r.fwd_sm90_serial_ms);
    }
    std::printf("]}\n");
    return 0;
  }
  std::printf("mha::flash_attn on %s, %s, median ms of CUDA events; registers a thread %s\n",
              props.name.c_str(), dtype == DType::Float16 ? "float16" : "bfloat16", regs.c_str());
  std::printf(
      "| B, H, S, D | causal | fwd ms | fwd TFLOP/s | bwd ms | bwd TFLOP/s | generic fwd ms "
      "| fwd ms, 2 / 1 row tiles a warp | bwd ms, 8 / 4 warps | tuned fwd | tuned bwd "
      "| sm90 fwd ms | sm90 fwd TFLOP/s | sm90-serial fwd ms |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Row& r : rows) {
    const double f = fwd_flops(r.c);
    std::printf(
        "| %lld, %lld, %lld, %lld | %s | %.4f | %.0f | %.4f | %.0f | %s | %.4f / %.4f "
        "| %.4f / %.4f | %s | %s | %s | %s | %s |\n",
        (long long)r.c.B, (long long)r.c.H, (long long)r.c.S, (long long)r.c.D,
        r.c.causal ? "yes" : "no", r.fwd_ms, f / (r.fwd_ms * 1e9), r.bwd_ms,
        2.5 * f / (r.bwd_ms * 1e9),
        r.generic_fwd_ms < 0 ? "-" : std::to_string(r.generic_fwd_ms).c_str(), r.fwd2_ms, r.fwd1_ms,
        r.bwd8_ms, r.bwd4_ms, r.fwd_choice.c_str(), r.bwd_choice.c_str(),
        r.fwd_sm90_ms < 0 ? "-" : fmt::format("{:.4f}", r.fwd_sm90_ms).c_str(),
        r.fwd_sm90_ms < 0 ? "-" : fmt::format("{:.0f}", f / (r.fwd_sm90_ms * 1e9)).c_str(),
        r.fwd_sm90_serial_ms < 0 ? "-" : fmt::format("{:.4f}", r.fwd_sm90_serial_ms).c_str());
  }
  return 0;
}
