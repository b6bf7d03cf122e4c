#!/bin/bash
# SPDX-License-Identifier: MIT
# A verification run for a small device budget (at most 565 s of time-boxed steps after the
# machine's start, less where they finish early), from the project's root on the GPU host:
#   bash tools/gpu_verify.sh      (the device call carries .offline, ../shared/gpu/README.md)
# Builds only mt_tests, minitensor and bench_silu, then, each step time-boxed and in order of
# what matters most when time runs short:
#  1. the whole doctest suite with its CUDA cases;
#  2. compute-sanitizer memcheck and racecheck over the SiLU cases (the 16-bit kernels of
#     Note [16-bit SiLU] among them) and the CUDA allocator and launch cases;
#  3. bfloat16 SiLU from 2^10 to 2^28, minitensor's bench beside torch's F.silu, the
#     tutorial's Triton kernel and a copy, each timed by do_bench in the same call;
#  4. bench_silu's host-cost table, under perf stat where the host has perf.
# Its logs, seven files under $OUT (the device tool brings back at most eight): build, tests,
# memcheck (both memcheck runs), racecheck, bf16 (both harnesses), hostcost, perf.
# tools/gpu_check.sh is the whole check; tools/gpu_short.sh the 2026-12-05 run.
set -u
OUT=${OUT:-/tmp/mt-gpu-verify}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
export PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
source .offline/env.sh >/dev/null 2>&1
t0=$SECONDS
at() { echo "[$1: rc $2 at $((SECONDS - t0)) s]"; }
[ -f build-gpu/build.ninja ] || meson setup build-gpu -Dcuda=enabled -Dwerror=false >"$OUT/build.log" 2>&1 ||
  { tail -20 "$OUT/build.log"; exit 1; }
timeout 150 ninja -C build-gpu -j16 tests/mt_tests tools/minitensor tools/bench_silu >>"$OUT/build.log" 2>&1
rc=$?; at build $rc
(( rc == 0 )) || { grep -A5 "error" "$OUT/build.log" | head -30; tail -2 "$OUT/build.log"; exit 1; }
T=build-gpu/tests/mt_tests

timeout 150 $T --no-intro >"$OUT/tests.log" 2>&1; at tests $?
grep -E "^\[doctest\] (test cases|assertions|Status)|^\[minitensor tests\]" "$OUT/tests.log"
grep -E -A4 "^TEST CASE:|ERROR:" "$OUT/tests.log" | head -40

CASES='-tc=*silu*,*allocat*,*launch*'
NOAPI='-tce=*driver errors name*,*out of memory is a clear error*,*every 16-bit input*'
timeout 70 compute-sanitizer --tool memcheck --print-limit 20 $T --no-intro "$CASES" "$NOAPI" \
    >"$OUT/memcheck.log" 2>&1; at memcheck $?
grep -E "ERROR SUMMARY|doctest\] (test cases|Status)" "$OUT/memcheck.log"
timeout 40 compute-sanitizer --tool racecheck --print-limit 20 $T --no-intro "$CASES" "$NOAPI" \
    >"$OUT/racecheck.log" 2>&1; at racecheck $?
grep -E "RACECHECK SUMMARY|ERROR SUMMARY|doctest\] (test cases|Status)" "$OUT/racecheck.log"
# The every-16-bit-input case alone under memcheck: 2 x 65,536 inputs a dtype, few launches.
timeout 40 compute-sanitizer --tool memcheck --print-limit 20 $T --no-intro '-tc=*every 16-bit input*' \
    >"$OUT/memcheck16.log" 2>&1; at memcheck-16bit $?
grep -E "ERROR SUMMARY|doctest\] (test cases|Status)" "$OUT/memcheck16.log"
cat "$OUT/memcheck16.log" >>"$OUT/memcheck.log" && rm "$OUT/memcheck16.log"

timeout 25 build-gpu/tools/minitensor bench silu --device cuda --dtype bfloat16 --min-log2 10 \
    --max-log2 28 >"$OUT/bf16.log" 2>&1; at bf16-bench $?
tail -n 22 "$OUT/bf16.log"
timeout 40 python3 - <<'PY' 2>&1 | tee "$OUT/bf16_torch.log"
import sys; sys.path.insert(0, "tools")
import torch, compare_torch as c
from triton.testing import do_bench
for lg in range(10, 29, 2):
    x = torch.randn(1 << lg, device="cuda", dtype=torch.bfloat16); y = torch.empty_like(x)
    t = do_bench(lambda: torch.nn.functional.silu(x), return_mode="median")
    tr = do_bench(lambda: c.triton_silu(x, y), return_mode="median")
    cp = do_bench(lambda: y.copy_(x), return_mode="median")
    print(f"bf16 2^{lg}: torch {t*1e3:.2f} us, triton {tr*1e3:.2f} us, copy {cp*1e3:.2f} us")
PY
at bf16-torch "${PIPESTATUS[0]}"
cat "$OUT/bf16_torch.log" >>"$OUT/bf16.log" && rm "$OUT/bf16_torch.log"

timeout 30 build-gpu/tools/bench_silu --host-only >"$OUT/hostcost.log" 2>&1; at hostcost $?
head -n 40 "$OUT/hostcost.log"
if command -v perf >/dev/null; then
  timeout 20 perf stat -e instructions,cycles,L1-icache-load-misses,iTLB-load-misses \
      build-gpu/tools/bench_silu --loop 200000 >"$OUT/perf.log" 2>&1; at perf $?
  tail -n 15 "$OUT/perf.log"
else
  echo "perf: not on this host"
fi
echo "total $((SECONDS - t0)) s"
