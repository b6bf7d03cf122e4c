#!/bin/bash
# SPDX-License-Identifier: MIT
# The host-cost measurements of docs/gpu.md ("Host cost") and docs/host-cost.md in one run
# on the GPU host, under 5 minutes: builds only bench_silu and minitensor (and
# bench_libtorch from the torch wheel, alongside, in both its forms), then
# compare_torch.py --dispatch --interleaved (both libraries in one process, loop by loop:
# 10 rounds, then 5 pinned to one CPU), `minitensor bench dispatch --self-check` (what that
# comparison can resolve on the host), the same as separate processes (5 rounds),
# bench_silu's host-cost table (twice), perf stat and perf record over mt::silu alone where
# perf is there, nsys if time is left. Logs and JSON under /tmp/mt-hostcost-work, packed into $OUT/all.tgz after each step
# (default /tmp/mt-hostcost) with the main logs beside it: the device tool brings back at
# most eight files, and a call cut off at its time limit still brings back the steps done.
#   bash tools/gpu_hostcost.sh
set -u
OUT=${OUT:-/tmp/mt-hostcost}
W=/tmp/mt-hostcost-work  # every log; $OUT gets all.tgz and the main logs
mkdir -p "$OUT" "$W"
T0=$SECONDS
el() {
  echo "$1 rc=$2 at $((SECONDS - T0)) s"
  tar czf "$OUT/all.tgz.tmp" -C "$W" . && mv "$OUT/all.tgz.tmp" "$OUT/all.tgz"
  cp "$W"/{info,hostcost1,dispatch,dispatch_pinned,dispatch_procs,selfcheck}.log "$OUT"/ 2>/dev/null
}
cd "$(dirname "$0")/.."
[ -e .offline ] || ln -sfn ../../.offline .offline  # in a .gpu-carry/<name> copy
export PATH=/usr/local/cuda/bin:$PATH
for d in /opt/nvidia/nsight-systems/*/bin /usr/local/cuda/nsight-systems*/bin; do [ -d "$d" ] && PATH=$PATH:$d; done
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; lscpu | grep -E "Model name|^CPU\(s\)|MHz"; which perf nsys; cat /proc/sys/kernel/perf_event_paranoid; } >"$W/info.log" 2>&1
source .offline/env.sh >/dev/null
TD=$(python3 -c 'import os,torch;print(os.path.dirname(torch.__file__))')
TA=$(python3 -c 'import torch;print(int(torch._C._GLIBCXX_USE_CXX11_ABI))')
LTFLAGS=(-O2 -std=c++20 -w -D_GLIBCXX_USE_CXX11_ABI="$TA" -I. -I"$TD/include")
( g++ "${LTFLAGS[@]}" tools/bench_libtorch.cpp -o /tmp/bench_libtorch \
    -L"$TD/lib" -ltorch_cpu -lc10 -Wl,-rpath,"$TD/lib" >"$W/libtorch_build.log" 2>&1 ) &
LT=$!
# The interleaved form: compiled now, linked with minitensor's rows once the build is done.
( g++ "${LTFLAGS[@]}" -DMT_INTERLEAVED -c tools/bench_libtorch.cpp -o /tmp/bench_interleaved.o \
    >"$W/interleaved_build.log" 2>&1 ) &
LI=$!
meson setup build-gpu -Dcuda=enabled -Dwerror=false >"$W/build.log" 2>&1
ninja -C build-gpu -j16 tools/bench_silu tools/minitensor >>"$W/build.log" 2>&1; el ninja $?
rm -f /tmp/bench_interleaved
wait $LI && g++ /tmp/bench_interleaved.o build-gpu/tools/libmt_bench.a -o /tmp/bench_interleaved \
    -Lbuild-gpu -lminitensor $(pkg-config --libs fmt) -Wl,-rpath,"$PWD/build-gpu" \
    -L"$TD/lib" -ltorch_cpu -lc10 -Wl,-rpath,"$TD/lib" >>"$W/interleaved_build.log" 2>&1; el interleaved-bench $?
wait $LT; el libtorch-bench $?
B=build-gpu/tools/bench_silu
M=build-gpu/tools/minitensor
timeout 100 python3 tools/compare_torch.py --dispatch --interleaved --libtorch-bench /tmp/bench_interleaved \
    --rounds 10 --json "$W/dispatch.json" >"$W/dispatch.log" 2>&1; el dispatch $?
timeout 60 taskset -c 2 python3 tools/compare_torch.py --dispatch --interleaved --libtorch-bench /tmp/bench_interleaved \
    --rounds 5 --json "$W/dispatch_pinned.json" >"$W/dispatch_pinned.log" 2>&1; el pinned $?
timeout 45 $M bench dispatch --self-check 5 >"$W/selfcheck.log" 2>&1; el selfcheck $?
timeout 60 python3 tools/compare_torch.py --dispatch --minitensor $M --libtorch-bench /tmp/bench_libtorch \
    --rounds 5 --json "$W/dispatch_procs.json" >"$W/dispatch_procs.log" 2>&1; el dispatch-procs $?
timeout 60 $B --host-only --json "$W/hostcost1.json" >"$W/hostcost1.log" 2>&1; el hostcost1 $?
(( SECONDS - T0 < 300 )) && timeout 60 $B --host-only --json "$W/hostcost2.json" >"$W/hostcost2.log" 2>&1; el hostcost2 $?
if command -v perf >/dev/null && (( SECONDS - T0 < 300 )); then
  for n in 100000 300000; do
    timeout 20 perf stat -x, -e instructions,cycles,L1-icache-load-misses,iTLB-load-misses,L1-dcache-load-misses \
        $B --loop $n >"$W/perf_stat_$n.log" 2>&1; el perf-stat-$n $?
  done
  timeout 25 perf record -g -o /tmp/perf.data $B --loop 300000 >"$W/perf_record.log" 2>&1; el perf-record $?
  timeout 20 perf report -i /tmp/perf.data --no-children --sort dso --stdio >"$W/perf_dso.log" 2>&1
  timeout 20 perf report -i /tmp/perf.data --no-children --sort dso,sym --percent-limit 0.3 --stdio -g none >"$W/perf_sym.log" 2>&1; el perf-report $?
fi
if command -v nsys >/dev/null && (( SECONDS - T0 < 215 )); then
  timeout $((255 - SECONDS + T0)) nsys profile -t cuda,osrt -o /tmp/hc --stats=true $B --loop 20000 >"$W/nsys.log" 2>&1; el nsys $?
fi
cat "$W/info.log"; tail -n 4 "$W/interleaved_build.log"; tail -n 25 "$W/dispatch.log"; tail -n 12 "$W/dispatch_pinned.log"
tail -n 10 "$W/dispatch_procs.log"; cat "$W/selfcheck.log"; tail -n 30 "$W/hostcost1.log"
