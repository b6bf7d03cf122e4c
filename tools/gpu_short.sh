#!/bin/bash
# SPDX-License-Identifier: MIT
# A short GPU check for a small device budget (about 100 s after the machine's start), from
# the project's root on the GPU host:  bash tools/gpu_short.sh
# Builds only mt_tests, minitensor and bench_silu (and bench_libtorch beside them), then: the
# SiLU test cases (the every-16-bit-input sweep among them), the bfloat16 SiLU from 2^22 to
# 2^28 with torch's F.silu, the tutorial's Triton kernel and a copy timed by do_bench, the
# host-cost table (bench_silu --host-only) and the dispatch comparison against libtorch.
# docs/gpu.md and docs/host-cost.md quote its 2026-12-05 run. tools/gpu_check.sh is the
# whole check.
set -u
OUT=${OUT:-/tmp/mt-gpu-short}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
export PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
source .offline/env.sh >/dev/null 2>&1
t0=$SECONDS
TD=$(python3 -c 'import os,torch;print(os.path.dirname(torch.__file__))')
TA=$(python3 -c 'import torch;print(int(torch._C._GLIBCXX_USE_CXX11_ABI))')
( g++ -O2 -std=c++20 -w -D_GLIBCXX_USE_CXX11_ABI="$TA" -I. -I"$TD/include" tools/bench_libtorch.cpp \
    -o /tmp/bench_libtorch -L"$TD/lib" -ltorch_cpu -lc10 -Wl,-rpath,"$TD/lib" >$OUT/libtorch_build.log 2>&1 ) &
meson setup build-gpu -Dcuda=enabled -Dwerror=false >$OUT/setup.log 2>&1 || { tail -20 $OUT/setup.log; exit 1; }
timeout 130 ninja -C build-gpu -j16 tests/mt_tests tools/minitensor tools/bench_silu >$OUT/build.log 2>&1 || { grep -A5 "error" $OUT/build.log | head -30; tail -2 $OUT/build.log; exit 1; }
echo "build $((SECONDS-t0)) s"
timeout 25 build-gpu/tests/mt_tests --no-intro '-tc=*silu*' 2>&1 | grep -E "ulp|of the bound|doctest\] (test cases|assertions|Status)|ERROR|FAILED" | head -24
timeout 20 build-gpu/tools/minitensor bench silu --device cuda --dtype bfloat16 --min-log2 22 --max-log2 28 2>&1 | tail -12
timeout 25 python3 - <<'PY'
import sys; sys.path.insert(0, "tools")
import torch, compare_torch as c
from triton.testing import do_bench
for lg in (22, 24, 26, 28):
    x = torch.randn(1 << lg, device="cuda", dtype=torch.bfloat16); y = torch.empty_like(x)
    t = do_bench(lambda: torch.nn.functional.silu(x), return_mode="median")
    tr = do_bench(lambda: c.triton_silu(x, y), return_mode="median")
    cp = do_bench(lambda: y.copy_(x), return_mode="median")
    print(f"bf16 2^{lg}: torch {t*1e3:.1f} us, triton {tr*1e3:.1f} us, copy {cp*1e3:.1f} us")
PY
echo "at $((SECONDS-t0)) s"
timeout 40 build-gpu/tools/bench_silu --host-only >$OUT/hostcost.log 2>&1; echo "hostcost rc $? at $((SECONDS-t0)) s"
cat $OUT/hostcost.log | head -50
wait
timeout 60 python3 tools/compare_torch.py --dispatch --minitensor build-gpu/tools/minitensor --libtorch-bench /tmp/bench_libtorch \
    --rounds 5 >$OUT/dispatch.log 2>&1; echo "dispatch rc $? at $((SECONDS-t0)) s"
tail -n 25 $OUT/dispatch.log
