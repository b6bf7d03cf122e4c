#!/bin/bash
# SPDX-License-Identifier: MIT
# The host-cost measurements of docs/gpu.md ("Host cost") and docs/host-cost.md in one run
# on the GPU host, under 5 minutes: builds only bench_silu and minitensor (and
# bench_libtorch from the torch wheel, alongside), then bench_silu's host-cost table
# (twice), compare_torch.py --dispatch (7 rounds, then 5 with everything pinned to one
# CPU), perf stat and perf record over mt::silu alone where perf is there, nsys if time is
# left. Logs and JSON under $OUT (default /tmp/mt-hostcost).
#   bash tools/gpu_hostcost.sh
set -u
OUT=${OUT:-/tmp/mt-hostcost}
mkdir -p "$OUT"
T0=$SECONDS
el() { echo "$1 rc=$2 at $((SECONDS - T0)) s"; }
cd "$(dirname "$0")/.."
[ -e .offline ] || ln -sfn ../../.offline .offline  # in a .gpu-carry/<name> copy
export PATH=/usr/local/cuda/bin:$PATH
for d in /opt/nvidia/nsight-systems/*/bin /usr/local/cuda/nsight-systems*/bin; do [ -d "$d" ] && PATH=$PATH:$d; done
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; lscpu | grep -E "Model name|^CPU\(s\)|MHz"; which perf nsys; cat /proc/sys/kernel/perf_event_paranoid; } >"$OUT/info.log" 2>&1
source .offline/env.sh >/dev/null
TD=$(python3 -c 'import os,torch;print(os.path.dirname(torch.__file__))')
TA=$(python3 -c 'import torch;print(int(torch._C._GLIBCXX_USE_CXX11_ABI))')
( g++ -O2 -std=c++20 -w -D_GLIBCXX_USE_CXX11_ABI="$TA" -I. -I"$TD/include" tools/bench_libtorch.cpp \
    -o /tmp/bench_libtorch -L"$TD/lib" -ltorch_cpu -lc10 -Wl,-rpath,"$TD/lib" >"$OUT/libtorch_build.log" 2>&1 ) &
LT=$!
meson setup build-gpu -Dcuda=enabled -Dwerror=false >"$OUT/build.log" 2>&1
ninja -C build-gpu -j16 tools/bench_silu tools/minitensor >>"$OUT/build.log" 2>&1; el ninja $?
wait $LT; el libtorch-bench $?
B=build-gpu/tools/bench_silu
M=build-gpu/tools/minitensor
timeout 60 $B --host-only --json "$OUT/hostcost1.json" >"$OUT/hostcost1.log" 2>&1; el hostcost1 $?
timeout 70 python3 tools/compare_torch.py --dispatch --minitensor $M --libtorch-bench /tmp/bench_libtorch \
    --rounds 7 --json "$OUT/dispatch.json" >"$OUT/dispatch.log" 2>&1; el dispatch $?
timeout 60 $B --host-only --json "$OUT/hostcost2.json" >"$OUT/hostcost2.log" 2>&1; el hostcost2 $?
(( SECONDS - T0 < 170 )) && timeout 50 taskset -c 2 python3 tools/compare_torch.py --dispatch --minitensor $M --libtorch-bench /tmp/bench_libtorch \
    --rounds 5 --json "$OUT/dispatch_pinned.json" >"$OUT/dispatch_pinned.log" 2>&1; el pinned $?
if command -v perf >/dev/null && (( SECONDS - T0 < 200 )); then
  for n in 100000 300000; do
    timeout 20 perf stat -x, -e instructions,cycles,L1-icache-load-misses,iTLB-load-misses,L1-dcache-load-misses \
        $B --loop $n >"$OUT/perf_stat_$n.log" 2>&1; el perf-stat-$n $?
  done
  timeout 25 perf record -g -o /tmp/perf.data $B --loop 300000 >"$OUT/perf_record.log" 2>&1; el perf-record $?
  timeout 20 perf report -i /tmp/perf.data --no-children --sort dso --stdio >"$OUT/perf_dso.log" 2>&1
  timeout 20 perf report -i /tmp/perf.data --no-children --sort dso,sym --percent-limit 0.3 --stdio -g none >"$OUT/perf_sym.log" 2>&1; el perf-report $?
fi
if command -v nsys >/dev/null && (( SECONDS - T0 < 215 )); then
  timeout $((255 - SECONDS + T0)) nsys profile -t cuda,osrt -o /tmp/hc --stats=true $B --loop 20000 >"$OUT/nsys.log" 2>&1; el nsys $?
fi
cat "$OUT/info.log"; tail -n 45 "$OUT/hostcost1.log"; tail -n 20 "$OUT/dispatch.log"
