#!/bin/bash
# SPDX-License-Identifier: MIT
# The GPU check, for the GPU host (docs/gpu.md, "The GPU host"), from the project's root:
#   bash tools/scripts/gpu_check.sh [PRESET]
# Builds build-gpu with CUDA, then runs the steps of PRESET, each time-boxed so the whole run
# stays under BUDGET seconds (default 530: the device tool's calls stop at 600). Logs and JSON
# go under $OUT (or /tmp/mt-gpu-check); a summary table is printed last. STEPS=a,b,c runs
# those steps instead of the preset's; DRY_RUN=1 prints each step's command and runs none
# (no GPU needed: tests/cli checks the presets that way).
# Presets:
#   all (default)  tests,tutorial,mlp,bench,silu,scenarios,attention,compile,reduction,sanitize
#   verify         tests, the SiLU/allocator/launch cases under memcheck and racecheck, the
#                  bfloat16 SiLU sweep beside torch and Triton, the host-cost table under perf
#   short          the SiLU cases, the bfloat16 sweep, the host-cost table, dispatch vs libtorch
#   hostcost       the host-cost table and perf stat/record, dispatch vs libtorch interleaved,
#                  pinned to one CPU, and as separate processes, bench dispatch --self-check
#   keys           vmap/autocast examples and benches, bench split on CUDA
#   cpu            the CPU path on two of the host's cores beside torch
# Steps: tests (every doctest case); silu-tests (the SiLU cases); tutorial (examples/
# silu_custom_op, the docs tests, under memcheck and racecheck); mlp (training on cuda and
# cpu, the SGD step foreach vs loop); bench (the MLP step vs PyTorch, dispatch host cost vs
# libtorch); dispatch (the dispatch comparison alone); dispatch-more (pinned, processes,
# self-check); hostcost (bench_silu's host-cost table, perf stat); perf-record; silu (the
# SiLU sweep vs PyTorch/Triton, and ncu); silu-bf16 (bfloat16 SiLU 2^10..2^28 beside
# torch, Triton and a copy, do_bench medians); scenarios (examples/ops but flash_attn: tests,
# memcheck, racecheck, benches vs torch); attention (mha::flash_attn: tests, sanitizers,
# training, bench vs SDPA); attention-sm90 (mha::flash_attn's wgmma forward on a compute
# capability 9.0 GPU: its (gpu) case against the float64 reference, then under memcheck,
# racecheck and synccheck, and the bench vs the mma.sync forward and SDPA); compile (mt::compile's tests, memcheck, compare_torch.py
# --compile); reduction (jit::reduction's cases on cuda:0, under memcheck, racecheck and
# synccheck, bench reduction: the builder's sum of squares vs mt::sum(x * x) and the copy
# floor, and the same beside torch's (x * x).sum()); keys; autocast (the MLP step fp32 and autocast bf16, each vs torch's);
# autocast-kernels (that bf16 step's kernels beside torch's, timed by ncu); cpu;
# cpu-mlp (the MLP step on 2 cores vs torch, matmul three ways); cpu-mlp-perf (its cycles);
# cpu-gemm (that step op by op, and under each cache blocking of the own GEMM);
# sanitize (memcheck, racecheck, synccheck over the CUDA cases);
# sanitize-silu (memcheck and racecheck over the SiLU, allocator and launch cases);
# sanitize-cases (the three tools over the cases SAN_CASES names);
# dispatch-before (bench dispatch against the tree in BEFORE=DIR, built alike here).
set -u
OUT=${OUT:-/tmp/mt-gpu-check}
mkdir -p "$OUT"
cd "$(dirname "$0")/../.."
export PATH=/usr/local/cuda/bin:$PATH
export PYTHONUNBUFFERED=1
BUDGET=${BUDGET:-530}  # seconds for the whole script
PRESET=${1:-all}
case $PRESET in
  all) preset_steps=tests,tutorial,mlp,bench,silu,scenarios,attention,compile,reduction,sanitize targets=() ;;
  verify) preset_steps=tests,sanitize-silu,silu-bf16,hostcost targets=(tests/mt_tests tools/minitensor tools/bench_silu) ;;
  short) preset_steps=silu-tests,silu-bf16,hostcost,dispatch targets=(tests/mt_tests tools/minitensor tools/bench_silu) ;;
  hostcost) preset_steps=hostcost,perf-record,dispatch,dispatch-more targets=(tools/minitensor tools/bench_silu) ;;
  keys) preset_steps=keys targets=(tools/minitensor examples/per_sample_grads) ;;
  cpu) preset_steps=cpu targets=(tools/minitensor tools/bench_compile_cpu) ;;
  *) echo "gpu_check.sh: unknown preset '$PRESET' (all, verify, short, hostcost, keys, cpu)" >&2; exit 2 ;;
esac
STEPS=${STEPS:-$preset_steps}
DRY_RUN=${DRY_RUN:-0}
want() { [[ ",$STEPS," == *",$1,"* ]]; }
have() { [ "$DRY_RUN" = 1 ] || [ -x "$1" ]; }  # a built program (any, in a dry run)
declare -A STATUS TIME
ORDER=()  # the steps in the order they ran, for the summary

left() { echo $((BUDGET - SECONDS)); }
# step NAME CAP LOG cmd...: runs cmd with a timeout of min(CAP, time left - reserve).
step() {
  local name=$1 cap=$2 log=$3; shift 3
  ORDER+=("$name")
  local l=$(( $(left) - 10 ))
  (( l < cap )) && cap=$l
  if (( cap < 15 )); then STATUS[$name]="skipped (no time)"; TIME[$name]=0; echo "== $name skipped" | tee -a "$log"; return 1; fi
  echo "== $name (timeout ${cap}s): $*" | tee -a "$log"
  if [ "$DRY_RUN" = 1 ]; then STATUS[$name]=dry; TIME[$name]=0; return 0; fi
  local t0=$SECONDS
  timeout -k 5 "$cap" "$@" >>"$log" 2>&1
  local rc=$?
  TIME[$name]=$((SECONDS - t0))
  if (( rc == 0 )); then STATUS[$name]=ok; elif (( rc == 124 || rc == 137 )); then STATUS[$name]="TIMEOUT"; else STATUS[$name]="FAIL rc=$rc"; fi
  echo "== $name: ${STATUS[$name]} in ${TIME[$name]}s" | tee -a "$log"
  tail -n 25 "$log"
  return $rc
}

if [ "$DRY_RUN" != 1 ]; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  ls .offline/debs
  # shellcheck disable=SC1091  # the GPU host's offline dependencies (docs/gpu.md)
  source .offline/env.sh
fi >"$OUT/build.log" 2>&1

if [ ! -f build-gpu/build.ninja ]; then
  step setup 90 "$OUT/build.log" meson setup build-gpu -Dcuda=enabled -Dwerror=false
fi
# TARGETS="a b" builds only those (a short run's programs), in place of the preset's list.
[ -n "${TARGETS:-}" ] && read -r -a targets <<<"$TARGETS"
# mt_tests loads libraries built beside it (the load probes, the fake NVRTC): a short run
# that builds mt_tests builds them too, or their cases fail for want of the files.
if [[ " ${targets[*]} " == *" tests/mt_tests "* ]]; then
  for v in ctor_throws block_throws_int dep nested cycle defines_add mt_library bad_block user_ops; do
    targets+=("tests/libload_probe_$v.so")
  done
  targets+=(tests/fake_nvrtc/libfake_nvrtc.so)
fi
step build 240 "$OUT/build.log" ninja -C build-gpu -j16 -k 0 "${targets[@]}"
if [ "${STATUS[build]:-}" != ok ]; then
  grep -n "error" "$OUT/build.log" | head -40
fi

if want tests && have build-gpu/tests/mt_tests; then
  # TESTS='-tc=...' runs those cases only (the CUDA ones, in a short run).
  step tests 200 "$OUT/tests.log" build-gpu/tests/mt_tests --no-intro ${TESTS:-}
  grep -E "^\[doctest\] (test cases|assertions|Status)" "$OUT/tests.log"
fi
# The SiLU cases alone (the every-16-bit-input sweep among them).
if want silu-tests && have build-gpu/tests/mt_tests; then
  step silu-tests 60 "$OUT/tests.log" build-gpu/tests/mt_tests --no-intro '-tc=*silu*'
fi

# The tutorial on the GPU: the user's own CUDA kernels registered, checked (gradcheck,
# opcheck on cuda:0) and timed; the docs' snippets (their GPU blocks run here); both again
# under memcheck and racecheck.
if want tutorial && have build-gpu/examples/silu_custom_op; then
  step tutorial 60 "$OUT/tutorial.log" build-gpu/examples/silu_custom_op
  step demo-cuda 60 "$OUT/tutorial.log" build-gpu/tools/minitensor demo --device cuda
  step docs 120 "$OUT/tutorial.log" meson test -C build-gpu --suite integration --print-errorlogs \
      "docs tutorial" "docs readme" "example silu_custom_op"
  step tutorial-memcheck 90 "$OUT/tutorial.log" compute-sanitizer --tool memcheck \
      --print-limit 20 build-gpu/examples/silu_custom_op
  step tutorial-racecheck 90 "$OUT/tutorial.log" compute-sanitizer --tool racecheck \
      --print-limit 20 build-gpu/examples/silu_custom_op
fi

# The MLP on the GPU and on the CPU from one seed: both should train, to close losses.
if want mlp && have build-gpu/examples/mlp_train; then
  step mlp-train 60 "$OUT/mlp.log" bash -c \
      'build-gpu/examples/mlp_train --device cuda --steps 200 --every 50 && build-gpu/examples/mlp_train --device cpu --steps 200 --every 50'
  # The SGD update as one foreach_add_ (one multi-tensor launch) against a sub_ a parameter,
  # alternated, three rounds (docs/gpu.md, "The optimizer step").
  step mlp-sgd 90 "$OUT/mlp_sgd.log" bash -c \
      'for r in 1 2 3; do for s in loop foreach; do echo "round $r sgd $s"; build-gpu/tools/minitensor bench mlp --device cuda --shape 64x32x64 --shape 4096x1024x4096 --sgd $s --steps 200; done; done'
fi

# The host-cost table alone (docs/gpu.md, "Host cost"; Note [Host-cost rows] in
# tools/bench/bench_silu.cpp), and perf's counters over it where the host has perf. Not in the
# default STEPS: the silu step prints the same table.
if want hostcost && have build-gpu/tools/bench_silu; then
  step hostcost 60 "$OUT/hostcost.log" build-gpu/tools/bench_silu --host-only
  if command -v perf >/dev/null; then
    step hostcost-perf 60 "$OUT/hostcost.log" perf stat -e \
        instructions,cycles,L1-icache-load-misses,iTLB-load-misses,L1-dcache-load-misses \
        build-gpu/tools/bench_silu --host-only
  fi
fi
if want perf-record && have build-gpu/tools/bench_silu && command -v perf >/dev/null; then
  step perf-record 60 "$OUT/perf.log" bash -c '
    perf record -g -o /tmp/mt-perf.data build-gpu/tools/bench_silu --loop 300000 >/dev/null &&
    perf report -i /tmp/mt-perf.data --no-children --sort dso --stdio &&
    perf report -i /tmp/mt-perf.data --no-children --sort dso,sym --percent-limit 0.3 --stdio -g none'
fi

if want silu && have build-gpu/tools/bench_silu; then
  step bench+torch 150 "$OUT/bench.log" python3 tools/bench/compare_torch.py \
      --bench build-gpu/tools/bench_silu --json "$OUT/compare.json"
  # bfloat16 SiLU at 2^26 under ncu: minitensor's vector kernel, then the tutorial's Triton
  # kernel and torch's F.silu, with the same metrics (docs/gpu.md, "bfloat16 SiLU").
  NCU_METRICS=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__throughput.avg.pct_of_peak_sustained_elapsed,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,launch__grid_size,launch__block_size
  step silu-ncu 90 "$OUT/silu_ncu.log" bash -c '
    ncu --metrics "$1" -k regex:silu_fwd_vec --launch-count 1 build-gpu/tools/minitensor bench silu \
        --device cuda --dtype bfloat16 --min-log2 26 --max-log2 26 --warmup 0 --repeats 1
    ncu --metrics "$1" -k regex:silu --launch-count 2 python3 -c "
import sys; sys.path.insert(0, \"tools/bench\"); import compare_torch as c, torch
x = torch.randn(1 << 26, device=\"cuda\", dtype=torch.bfloat16); y = torch.empty_like(x)
c.triton_silu(x, y); torch.nn.functional.silu(x); torch.cuda.synchronize()"' _ "$NCU_METRICS"
fi
# bfloat16 SiLU from 2^10 to 2^28: minitensor's bench, then torch's F.silu, the tutorial's
# Triton kernel and a copy, each a do_bench median in one process.
if want silu-bf16 && have build-gpu/tools/minitensor; then
  step silu-bf16 40 "$OUT/bf16.log" build-gpu/tools/minitensor bench silu --device cuda \
      --dtype bfloat16 --min-log2 10 --max-log2 28
  step silu-bf16-torch 60 "$OUT/bf16.log" python3 -c '
import sys; sys.path.insert(0, "tools/bench")
import torch, compare_torch as c
from triton.testing import do_bench
for lg in range(10, 29, 2):
    x = torch.randn(1 << lg, device="cuda", dtype=torch.bfloat16); y = torch.empty_like(x)
    t = do_bench(lambda: torch.nn.functional.silu(x), return_mode="median")
    tr = do_bench(lambda: c.triton_silu(x, y), return_mode="median")
    cp = do_bench(lambda: y.copy_(x), return_mode="median")
    print(f"bf16 2^{lg}: torch {t*1e3:.2f} us, triton {tr*1e3:.2f} us, copy {cp*1e3:.2f} us")'
fi
if want bench && grep -q -- '--mlp' tools/bench/compare_torch.py 2>/dev/null; then
  step mlp+torch 120 "$OUT/bench_mlp.log" python3 tools/bench/compare_torch.py --mlp \
      --minitensor build-gpu/tools/minitensor --json "$OUT/compare_mlp.json"
fi

if { want bench || want dispatch; } && have build-gpu/tools/minitensor; then
  # Host cost of one tiny op, against libtorch C++ built from the torch wheel
  # (tools/bench/bench_libtorch.cpp): with minitensor's rows linked in, the two timed loop by loop
  # in one process (docs/host-cost.md); else each in its own process, alternately.
  TORCH_DIR=$(python3 -c 'import os, torch; print(os.path.dirname(torch.__file__))' 2>/dev/null)
  TORCH_ABI=$(python3 -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))' 2>/dev/null)
  if [ -n "$TORCH_DIR" ]; then
    rm -f build-gpu/tools/bench_libtorch build-gpu/tools/bench_interleaved{,.o}  # none from an older tree
    step libtorch-build 180 "$OUT/dispatch.log" bash -c '
      f=(-O2 -std=c++20 -w -D_GLIBCXX_USE_CXX11_ABI="$1" -I. -I"$2/include")
      lt=(-L"$2/lib" -ltorch_cpu -lc10 -Wl,-rpath,"$2/lib")
      g++ "${f[@]}" tools/bench/bench_libtorch.cpp -o build-gpu/tools/bench_libtorch "${lt[@]}" & p=$!
      g++ "${f[@]}" -DMT_INTERLEAVED -c tools/bench/bench_libtorch.cpp -o build-gpu/tools/bench_interleaved.o &&
        g++ build-gpu/tools/bench_interleaved.o build-gpu/tools/libmt_bench.a \
          -o build-gpu/tools/bench_interleaved -Lbuild-gpu -lminitensor $(pkg-config --libs fmt) \
          -Wl,-rpath,"$PWD/build-gpu" "${lt[@]}"
      r=$?; wait $p || r=1; exit $r' _ "$TORCH_ABI" "$TORCH_DIR"
  fi
  if have build-gpu/tools/bench_interleaved; then
    step dispatch 120 "$OUT/dispatch.log" python3 tools/bench/compare_torch.py --dispatch --interleaved \
        --libtorch-bench build-gpu/tools/bench_interleaved \
        --rounds "${ROUNDS:-10}" --json "$OUT/compare_dispatch.json"
  elif have build-gpu/tools/bench_libtorch; then
    step dispatch 120 "$OUT/dispatch.log" python3 tools/bench/compare_torch.py --dispatch \
        --minitensor build-gpu/tools/minitensor --libtorch-bench build-gpu/tools/bench_libtorch \
        --rounds "${ROUNDS:-5}" --json "$OUT/compare_dispatch.json"
  else
    step dispatch 60 "$OUT/dispatch.log" build-gpu/tools/minitensor bench dispatch
  fi
  # dispatch-more: the interleaved comparison pinned to one CPU, the two as separate
  # processes, and what the comparison can resolve on this host (bench dispatch --self-check).
  if want dispatch-more && have build-gpu/tools/bench_interleaved; then
    step dispatch-pinned 60 "$OUT/dispatch.log" taskset -c 2 python3 tools/bench/compare_torch.py \
        --dispatch --interleaved --libtorch-bench build-gpu/tools/bench_interleaved --rounds 5 \
        --json "$OUT/compare_dispatch_pinned.json"
  fi
  if want dispatch-more && have build-gpu/tools/bench_libtorch; then
    step dispatch-procs 60 "$OUT/dispatch.log" python3 tools/bench/compare_torch.py --dispatch \
        --minitensor build-gpu/tools/minitensor --libtorch-bench build-gpu/tools/bench_libtorch \
        --rounds 5 --json "$OUT/compare_dispatch_procs.json"
  fi
  if want dispatch-more; then
    step dispatch-selfcheck 45 "$OUT/dispatch.log" build-gpu/tools/minitensor bench dispatch --self-check 5
  fi
fi

# dispatch-before: this tree's `bench dispatch` against another tree's, both built alike here
# and alternated on one CPU (tools/bench/dispatch_ab.py). BEFORE=DIR names that tree's source,
# e.g. `git archive REF | tar -x -C .offline/before` (.offline is carried to the GPU host).
if want dispatch-before && [ -n "${BEFORE:-}" ]; then
  if [ ! -f build-before/build.ninja ]; then
    step before-setup 90 "$OUT/dispatch.log" meson setup build-before "$BEFORE" -Dcuda=enabled -Dwerror=false
  fi
  step before-build 240 "$OUT/dispatch.log" ninja -C build-before -j16 tools/minitensor
  if have build-before/tools/minitensor && have build-gpu/tools/minitensor; then
    step dispatch-before 150 "$OUT/dispatch.log" taskset -c 2 python3 tools/bench/dispatch_ab.py \
        build-gpu/tools/minitensor build-before/tools/minitensor --rounds "${ROUNDS:-8}" \
        --json "$OUT/dispatch_ab.json"
  fi
fi

# The tutorial's application scenarios (examples/ops): each op's tests (its (gpu) cases on
# cuda:0, then again under memcheck and racecheck), the PINN-style fit, the bench against
# torch's forms.
if want scenarios && have build-gpu/examples/ops/laplacian3d/laplacian3d_tests; then
  step scenarios 240 "$OUT/scenarios.log" bash -c '
    set -e
    for t in build-gpu/examples/ops/*/*_tests; do [[ $t == *flash_attn* ]] || "$t" --no-intro; done
    for t in build-gpu/examples/ops/*/*_tests; do
      [[ $t == *flash_attn* ]] && continue  # step attention
      compute-sanitizer --tool memcheck --print-limit 20 --error-exitcode 1 "$t" --no-intro "-tc=*(gpu)*"
      compute-sanitizer --tool racecheck --print-limit 20 --error-exitcode 1 "$t" --no-intro "-tc=*(gpu)*"
    done
    build-gpu/examples/ops/laplacian3d/laplacian3d_poisson
    python3 tools/bench/compare_torch.py --scenarios \
        --laplacian-bench build-gpu/examples/ops/laplacian3d/laplacian3d_bench \
        --emb-agg-bench build-gpu/examples/ops/emb_agg/emb_agg_bench --json "$1/compare_scenarios.json"' _ "$OUT"
fi

# mha::flash_attn (examples/ops/flash_attn): its tests (the (gpu) cases but the S = 16384
# allocation one again under memcheck and racecheck), the training example, the bench
# against torch's SDPA and the unfused form.
if want attention && have build-gpu/examples/ops/flash_attn/flash_attn_tests; then
  step attention 300 "$OUT/attention.log" bash -c '
    set -e
    t=build-gpu/examples/ops/flash_attn/flash_attn_tests
    "$t" --no-intro
    compute-sanitizer --tool memcheck --print-limit 20 --error-exitcode 1 "$t" --no-intro "-tc=*(gpu)*" "-tce=*S x S*"
    compute-sanitizer --tool racecheck --print-limit 20 --error-exitcode 1 "$t" --no-intro "-tc=*(gpu)*" "-tce=*S x S*"
    build-gpu/examples/ops/flash_attn/flash_attn_train
    python3 tools/bench/compare_torch.py --attention \
        --flash-attn-bench build-gpu/examples/ops/flash_attn/flash_attn_bench --json "$1/compare_attention.json"' _ "$OUT"
fi

# The wgmma forward of mha::flash_attn (opt-in: MHA_FLASH_ATTN_FWD_KERNEL=sm90; Note [Hopper
# forward] in examples/ops/flash_attn/flash_attn.cu): its (gpu) case (forward and gradients
# against the float64 reference, float16 and bfloat16, D 64 and 128, causal and not, tails),
# the CPU emulation of the same kernel, the bench (the wgmma and mma.sync forwards and SDPA,
# TFLOP/s), then the case under memcheck, synccheck and racecheck; each part runs whatever the
# one before gave (the step fails if any did). A short run:
#   STEPS=attention-sm90 BUDGET=420 TARGETS="examples/ops/flash_attn/flash_attn_tests
#   examples/ops/flash_attn/flash_attn_bench" bash tools/scripts/gpu_check.sh
if want attention-sm90 && have build-gpu/examples/ops/flash_attn/flash_attn_tests; then
  step attention-sm90 400 "$OUT/attention_sm90.log" bash -c '
    rc=0
    t=build-gpu/examples/ops/flash_attn/flash_attn_tests
    case="-tc=*(gpu): the wgmma forward*"
    "$t" --no-intro "$case,*wgmma forward computes the reference under a CPU emulation*" || rc=1
    python3 tools/bench/compare_torch.py --attention \
        --flash-attn-bench build-gpu/examples/ops/flash_attn/flash_attn_bench \
        --json "$1/compare_attention_sm90.json" || rc=1
    for tool in memcheck synccheck racecheck; do
      compute-sanitizer --tool $tool --print-limit 20 --error-exitcode 1 "$t" --no-intro "$case" || rc=1
    done
    exit $rc' _ "$OUT"
fi

# mt::compile: its test suite (CUDA cases on cuda:0), again under memcheck, and the compiled
# MLP step and x * sigmoid(x) against torch eager, CUDA graph and torch.compile.
if want compile && have build-gpu/tests/mt_tests; then
  step compile-tests 120 "$OUT/compile.log" env MT_LOG=compile build-gpu/tests/mt_tests --no-intro -ts=compile
  step compile-memcheck 150 "$OUT/compile.log" compute-sanitizer --tool memcheck --print-limit 20 \
      --error-exitcode 1 build-gpu/tests/mt_tests --no-intro -ts=compile
  step compile+torch 150 "$OUT/compile_torch.log" python3 tools/bench/compare_torch.py --compile \
      --minitensor build-gpu/tools/minitensor --json "$OUT/compare_compile.json"
fi

# reduction: the reduction builder's cases (values on cuda:0 against the CPU for every dtype
# and kernel variant), again under memcheck, racecheck and synccheck (goal: 0 errors), and
# bench reduction on cuda, then beside torch's (x * x).sum() (compare_torch.py --reduction;
# issue 38: within 5% of mt::sum(x * x) compiled and of torch at 2^24 and above, at least 85%
# of the copy floor).
if want reduction && have build-gpu/tests/mt_tests; then
  step reduction-tests 60 "$OUT/reduction.log" build-gpu/tests/mt_tests --no-intro -ts=reduction
  for tool in memcheck racecheck synccheck; do
    step "reduction-$tool" 90 "$OUT/reduction.log" compute-sanitizer --tool "$tool" --print-limit 20 \
        --error-exitcode 1 build-gpu/tests/mt_tests --no-intro '-tc=reduction (gpu)*'
  done
  step reduction-bench 120 "$OUT/reduction.log" build-gpu/tools/minitensor bench reduction --device cuda
  step reduction+torch 150 "$OUT/reduction_torch.log" python3 tools/bench/compare_torch.py --reduction \
      --minitensor build-gpu/tools/minitensor --json "$OUT/compare_reduction.json"
fi

# keys (not in the default list): the Batched and Autocast keys on the GPU: the per-sample
# gradients example (vmap(grad) against a loop, the MLP under autocast bfloat16) and
# bench vmap on cuda and on two CPU cores; bench split (a cudagraph_unsafe op in a compiled
# step: eager against the split CUDA graph).
if want keys && have build-gpu/tools/minitensor; then
  step keys-example 120 "$OUT/keys.log" build-gpu/examples/per_sample_grads --device cuda
  step keys-bench-cuda 120 "$OUT/keys.log" build-gpu/tools/minitensor bench vmap --device cuda
  step keys-bench-cpu 120 "$OUT/keys.log" taskset -c 0,1 build-gpu/tools/minitensor bench vmap --device cpu
  step keys-split-cuda 120 "$OUT/keys.log" build-gpu/tools/minitensor bench split --device cuda
fi

# autocast (not in the default list): the MLP step on cuda:0 in float32 and with each step
# under autocast bfloat16, each beside torch's (torch.autocast around the forward and the loss).
if want autocast && have build-gpu/tools/minitensor; then
  step autocast-fp32 120 "$OUT/autocast.log" python3 tools/bench/compare_torch.py --mlp \
      --minitensor build-gpu/tools/minitensor --json "$OUT/autocast-fp32.json"
  step autocast-bf16 120 "$OUT/autocast.log" python3 tools/bench/compare_torch.py --mlp --autocast bfloat16 \
      --minitensor build-gpu/tools/minitensor --json "$OUT/autocast-bf16.json"
fi

# autocast-kernels (not in the default list): the kernels of one 4096/1024/4096 step under
# autocast bfloat16, minitensor's beside torch's, each timed by ncu (tools/bench/kernel_profile.py).
if want autocast-kernels && have build-gpu/tools/minitensor; then
  step autocast-kernels 200 "$OUT/autocast-kernels.log" python3 tools/bench/kernel_profile.py \
      --minitensor build-gpu/tools/minitensor --autocast bfloat16 --json "$OUT/autocast-kernels.json"
fi

# cpu-mlp (not in the default list): the 64/32/64 and 512/256/512 MLP steps against torch's on
# two of the host's cores, three ways: matmul's own choice (the library's packed kernel where
# OpenBLAS runs an old core's kernels: docs/cpu.md), OpenBLAS forced (MT_MATMUL=blas), and
# OpenBLAS forced with its AVX-512 kernels (OPENBLAS_CORETYPE=SkylakeX).
if want cpu-mlp && have build-gpu/tools/minitensor; then
  step cpu-mlp-doctor 30 "$OUT/cpu-mlp.log" bash -c 'build-gpu/tools/minitensor doctor | grep -E "^(cpu|blas) "'
  step cpu-mlp-auto 120 "$OUT/cpu-mlp.log" taskset -c 0,1 python3 tools/bench/compare_torch.py --mlp --device cpu \
      --minitensor build-gpu/tools/minitensor --json "$OUT/cpu-mlp-auto.json"
  step cpu-mlp-blas 120 "$OUT/cpu-mlp.log" env MT_MATMUL=blas taskset -c 0,1 python3 tools/bench/compare_torch.py \
      --mlp --device cpu --minitensor build-gpu/tools/minitensor --json "$OUT/cpu-mlp-blas.json"
  step cpu-mlp-skx 120 "$OUT/cpu-mlp.log" env MT_MATMUL=blas OPENBLAS_CORETYPE=SkylakeX taskset -c 0,1 python3 \
      tools/bench/compare_torch.py --mlp --device cpu --minitensor build-gpu/tools/minitensor \
      --json "$OUT/cpu-mlp-skx.json"
fi

# cpu-gemm (not in the default list): where the 512/256/512 CPU step's time goes op by op on two
# of the host's cores (bench mlp --op-times, the own kernel and OpenBLAS's SkylakeX), then the
# step under each cache blocking of the own kernel beside OpenBLAS's (tools/bench/cpu_gemm_sweep.py).
if want cpu-gemm && have build-gpu/tools/minitensor; then
  step cpu-gemm-ops 60 "$OUT/cpu-gemm.log" taskset -c 0,1 build-gpu/tools/minitensor bench mlp --device cpu \
      --shape 512x256x512 --steps 60 --op-times
  step cpu-gemm-ops-skx 60 "$OUT/cpu-gemm.log" env MT_MATMUL=blas OPENBLAS_CORETYPE=SkylakeX taskset -c 0,1 \
      build-gpu/tools/minitensor bench mlp --device cpu --shape 512x256x512 --steps 60 --op-times
  step cpu-gemm-sweep 240 "$OUT/cpu-gemm.log" taskset -c 0,1 python3 tools/bench/cpu_gemm_sweep.py \
      build-gpu/tools/minitensor --rounds ${GEMM_ROUNDS:-3} --max-seconds 150 --json "$OUT/cpu-gemm-sweep.json"
fi

# cpu-mlp-perf (not in the default list): where the 512/256/512 CPU step's cycles go on two of
# the host's cores (perf record over bench mlp, by symbol).
if want cpu-mlp-perf && have build-gpu/tools/minitensor && command -v perf >/dev/null; then
  step cpu-mlp-perf 90 "$OUT/cpu-mlp-perf.log" bash -c '
    taskset -c 0,1 perf record -g -o /tmp/mt-mlp-perf.data build-gpu/tools/minitensor bench mlp \
        --device cpu --shape 512x256x512 --steps 200 >/dev/null &&
    perf report -i /tmp/mt-mlp-perf.data --no-children --sort dso,sym --percent-limit 0.5 --stdio -g none'
fi

# cpu (not in the default list): the CPU path on two of the host's cores, where torch is
# installed: the ops on 1 and 2 threads idle and beside busy loops, the 512/256/512 MLP step
# against torch's, torch's SiLU under the same contention, and CPU fusion (chains eager,
# compiled, fused; jit::pointwise's SiLU against mt::silu) on 1 and 2 threads.
if want cpu && have build-gpu/tools/minitensor; then
  step cpu-bench 100 "$OUT/cpu.log" taskset -c 0,1 build-gpu/tools/minitensor bench cpu
  step cpu-contended 100 "$OUT/cpu.log" taskset -c 0,1 build-gpu/tools/minitensor bench cpu --contended
  step cpu-blas 30 "$OUT/cpu.log" bash -c 'build-gpu/tools/minitensor doctor | grep -E "^(cpu|blas) "; \
      for c in "" Haswell SkylakeX; do echo "== OPENBLAS_CORETYPE=$c"; OPENBLAS_CORETYPE=$c taskset -c 0,1 \
      build-gpu/tools/minitensor doctor | grep "^blas "; done'
  step cpu-mlp+torch 120 "$OUT/cpu.log" taskset -c 0,1 python3 tools/bench/compare_torch.py --mlp --device cpu \
      --minitensor build-gpu/tools/minitensor
  # the same with OpenBLAS's AVX-512 kernels forced (doctor says when its own choice left them unused)
  step cpu-mlp+torch-skx 120 "$OUT/cpu.log" env OPENBLAS_CORETYPE=SkylakeX taskset -c 0,1 python3 \
      tools/bench/compare_torch.py --mlp --device cpu --minitensor build-gpu/tools/minitensor
  step cpu-torch-contended 100 "$OUT/cpu.log" taskset -c 0,1 python3 tools/bench/compare_torch.py --cpu-contended \
      --minitensor build-gpu/tools/minitensor
  step cpu-fusion 150 "$OUT/cpu.log" bash -c 'for t in 1 2; do echo "== MT_NUM_THREADS=$t"; \
      MT_NUM_THREADS=$t taskset -c 0,1 build-gpu/tools/bench_compile_cpu 9; done'
fi

# The cases that make a driver call fail on purpose (a bad device ordinal, an allocation
# past the GPU's memory) are left out of the sanitizer runs: compute-sanitizer counts the
# failed API call as an error.
NOAPI='-tce=*driver errors name*,*out of memory is a clear error*'
# The SiLU kernels (Note [16-bit SiLU]), the CUDA allocator and the launch cases under
# memcheck and racecheck; the every-16-bit-input case alone under memcheck (few launches).
if want sanitize-silu && have build-gpu/tests/mt_tests; then
  step memcheck-silu 70 "$OUT/memcheck.log" compute-sanitizer --tool memcheck --print-limit 20 \
      build-gpu/tests/mt_tests --no-intro '-tc=*silu*,*allocat*,*launch*' "$NOAPI,*every 16-bit input*"
  step racecheck-silu 40 "$OUT/racecheck.log" compute-sanitizer --tool racecheck --print-limit 20 \
      build-gpu/tests/mt_tests --no-intro '-tc=*silu*,*allocat*,*launch*' "$NOAPI,*every 16-bit input*"
  step memcheck-16bit 40 "$OUT/memcheck.log" compute-sanitizer --tool memcheck --print-limit 20 \
      build-gpu/tests/mt_tests --no-intro '-tc=*every 16-bit input*'
fi
# sanitize-cases (not in the default list): memcheck, racecheck and synccheck over the doctest
# cases SAN_CASES names (a -tc filter), e.g. the cases of a change's new kernels.
if want sanitize-cases && have build-gpu/tests/mt_tests; then
  for tool in memcheck racecheck synccheck; do
    step "cases-$tool" 120 "$OUT/sanitize-cases.log" compute-sanitizer --tool $tool --print-limit 20 \
        build-gpu/tests/mt_tests --no-intro "-tc=${SAN_CASES:-*(gpu)*}"
  done
fi

if want sanitize && have build-gpu/tests/mt_tests; then
  step memcheck 200 "$OUT/memcheck.log" compute-sanitizer --tool memcheck --print-limit 20 \
      build-gpu/tests/mt_tests --no-intro '-tc=*cuda*,*(gpu)*' "$NOAPI"
  # racecheck looks for shared-memory hazards. Every CUDA case but the op harness runs
  # with all kernels instrumented; the harness (thousands of launches) runs with every
  # minitensor kernel instrumented and cuBLAS's left out (instrumented, they took it past
  # 150 s; they are not ours to fix).
  step racecheck 120 "$OUT/racecheck.log" compute-sanitizer --tool racecheck --print-limit 20 \
      build-gpu/tests/mt_tests --no-intro '-tc=*cuda*,*(gpu)*' '-tce=ops on cuda*,*driver errors name*,*out of memory is a clear error*'
  step racecheck-ops 220 "$OUT/racecheck.log" compute-sanitizer --tool racecheck --print-limit 20 \
      --kernel-regex-exclude 'kns=gemm|gemv|xmma|cutlass|splitK|Kernel2|cublas' \
      build-gpu/tests/mt_tests --no-intro '-tc=ops on cuda*'
  step synccheck 120 "$OUT/synccheck.log" compute-sanitizer --tool synccheck --print-limit 20 \
      --kernel-regex-exclude 'kns=gemm|gemv|xmma|cutlass|splitK|Kernel2|cublas' \
      build-gpu/tests/mt_tests --no-intro '-tc=*cuda*,*(gpu)*' "$NOAPI"
fi

{
  echo
  echo "=================== SUMMARY ==================="
  printf "| step | status | s |\n|---|---|---|\n"
  for s in "${ORDER[@]}"; do
    [ -n "${STATUS[$s]:-}" ] && printf "| %s | %s | %s |\n" "$s" "${STATUS[$s]}" "${TIME[$s]}"
  done
  echo
  echo "tests:"; grep -E "^\[doctest\] (test cases|assertions|Status)" "$OUT/tests.log" 2>/dev/null
  grep -E -A3 "^TEST CASE:|ERROR:" "$OUT/tests.log" 2>/dev/null | head -n 60
  echo "memcheck:"; grep -E "ERROR SUMMARY|doctest\] (test cases|Status)" "$OUT/memcheck.log" 2>/dev/null
  echo "racecheck:"; grep -E "RACECHECK SUMMARY|ERROR SUMMARY|doctest\] (test cases|Status)" "$OUT/racecheck.log" 2>/dev/null
  echo "synccheck:"; grep -E "ERROR SUMMARY|doctest\] (test cases|Status)" "$OUT/synccheck.log" 2>/dev/null
  echo "sanitize-cases:"; grep -E "RACECHECK SUMMARY|ERROR SUMMARY|doctest\] (test cases|Status)" "$OUT/sanitize-cases.log" 2>/dev/null
  echo
  echo "tutorial:"; grep -E "cuda:0|2\^24|checks passed|CHECKS FAILED|ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/tutorial.log" 2>/dev/null
  echo "mlp_train:"; grep -E "first loss" "$OUT/mlp.log" 2>/dev/null
  echo "mlp sgd foreach/loop:"; grep -E "^round|^64/32|^4096/1024" "$OUT/mlp_sgd.log" 2>/dev/null
  echo "dispatch:"; tail -n 16 "$OUT/dispatch.log" 2>/dev/null
  echo "mlp step vs torch:"; tail -n 8 "$OUT/bench_mlp.log" 2>/dev/null
  echo "keys:"; grep -E "^\| |ratio|loss|largest|max|vmap|loop|ms" "$OUT/keys.log" 2>/dev/null | head -n 40
  echo "cpu:"; grep -E "^\| |^== |^(cpu|blas) |ratio|ms" "$OUT/cpu.log" 2>/dev/null | head -n 100
  echo "reduction:"; grep -E "doctest\] (test cases|Status)|ERROR SUMMARY|RACECHECK SUMMARY|^ *2\^|copy" "$OUT/reduction.log" 2>/dev/null
  echo "compile:"; grep -E "doctest\] (test cases|Status)|ERROR SUMMARY|CUDA graph" "$OUT/compile.log" 2>/dev/null
  tail -n 16 "$OUT/compile_torch.log" 2>/dev/null
  echo "scenarios:"; grep -E "^\| [0-9]+ \||doctest\] (test cases|Status)|converged|ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/scenarios.log" 2>/dev/null
  echo "silu under ncu:"; grep -E "silu|duration|throughput|inst_executed|issue_active|warps_active|registers|grid_size|block_size" "$OUT/silu_ncu.log" 2>/dev/null | sed 's/  */ /g' | head -n 40
  echo "bench + torch comparison:"
  sed -n '/^| dtype | pass | n | minitensor ms/,$p' "$OUT/bench.log" 2>/dev/null
  echo "total ${SECONDS}s"
} | tee "$OUT/summary.txt"
