#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""SiLU on the GPU: PyTorch, the tutorial-style Triton kernel and minitensor side by side.

Times with triton.testing.do_bench (medians, ms) at the sizes bench_silu uses:
torch F.silu, torch.ops.aten.silu_backward, x * torch.sigmoid(x), and a standard
@triton.jit elementwise SiLU (BLOCK_SIZE 1024); runs build/tools/bench_silu --json in
the same run and prints one ratio table (ratio = other / minitensor: > 1 means
minitensor is faster).

  compare_torch.py [--bench PATH] [--json OUT] [--max-log2 K] [--mt-json EXISTING]

With --mlp: the two-layer MLP training step (examples/mlp.h: y = silu(x W1 + b1) W2 + b2,
MSE, SGD p -= lr * grad under no_grad, grads cleared) in PyTorch eager and in
`minitensor bench mlp --device cuda --json` at the same shapes (64/32/64 and
4096/1024/4096, output dim = in), timed the same way (median ms per step after warm-up,
the device synchronized before each clock read); prints ms/step side by side with the
ratio torch / minitensor (> 1 means minitensor is faster).

  compare_torch.py --mlp [--minitensor PATH] [--json OUT] [--mt-json EXISTING] [--autocast bfloat16]
                         [--steps N] [--warmup N]

With --mlp --device cpu: the same on the CPU at 64/32/64 and 512/256/512, torch with as many
threads as minitensor has (the CPUs this process may run on, or MT_NUM_THREADS), so that
`taskset -c 0,1 python3 tools/bench/compare_torch.py --mlp --device cpu` compares both on the same
2 cores.

With --cpu-contended: SiLU on 2^20 float32 elements on the CPU, 1 thread against all usable
CPUs' threads, beside a busy loop on every usable CPU: torch (busy loops as processes, the two
thread counts alternating in blocks of calls) and `minitensor bench cpu --contended --op silu
--json` (its own busy loops) one after the other; prints the medians and each one's ratio
(multi-thread / single-thread: the 1.5x goal of docs/cpu.md).

  compare_torch.py --cpu-contended [--minitensor PATH] [--json OUT]

With --dispatch: the host cost of one call against libtorch C++ (tools/bench/bench_libtorch.cpp),
in separate processes or, with --interleaved, in one process as pairs of short loops;
tools/bench/dispatch_compare.py (which also runs without torch) says how.

  compare_torch.py --dispatch --libtorch-bench PATH [--interleaved] [--minitensor PATH]
                   [--rounds N] [--json OUT]

With --scenarios: the tutorial's application scenarios (examples/ops/): pde::laplacian3d
(examples/ops/laplacian3d/laplacian3d_bench --json, float32 N^3 grids, N = 128, 256, 512)
against torch's forms of the same 7-point stencil, timed in the same run with do_bench
(medians): F.conv3d with the stencil as a 3x3x3 weight, and sliced adds on a padded copy
(F.pad, zero or circular); prints ms, GB/s, % of a copy of the same bytes and the ratio
torch / minitensor (> 1 means minitensor is faster).

And deeprec::emb_agg (examples/ops/emb_agg/emb_agg_bench --json: float32 and bfloat16, mode sum, V=1e6
D=128 4096 bags of 50 and V=1e5 D=64 65536 bags of 20) against F.embedding_bag forward and
backward (dense weight gradient) at the same shapes.

  compare_torch.py --scenarios [--laplacian-bench PATH] [--emb-agg-bench PATH] [--json OUT]

With --attention: mha::flash_attn (examples/ops/flash_attn/flash_attn_bench --json, float16,
B,H,S,D = 4,16,1024,64; 4,16,4096,64 causal and not; 1,16,16384,128 causal) against
F.scaled_dot_product_attention forward and backward (autograd.grad of q, k, v) and the
unfused matmul-softmax-matmul forward, timed with do_bench in the same run; prints ms,
TFLOP/s (forward 4 B H S^2 D, halved when causal; backward 2.5 times that) and the ratios;
on a compute capability 9.0 GPU also the wgmma forward (the bench's fwd_sm90_ms) beside the
mma.sync one and SDPA.

  compare_torch.py --attention [--flash-attn-bench PATH] [--json OUT]

With --compile: the small MLP training step (64/32/64) in torch eager, replayed as a torch
CUDA graph (whole step captured: forward, backward, SGD) and through
torch.compile(mode="reduce-overhead"), against `minitensor bench mlp --compile --device
cuda --json` (minitensor eager and mt::compile, alternating) in the same run; then a
user's x * sigmoid(x) (torch eager and torch.compile) against minitensor's compiled one and
mt::silu at 2^20..2^26. Prints ms and the ratios other / minitensor compiled (> 1 means
minitensor compiled is faster), and the first-call (compile) times.

  compare_torch.py --compile [--minitensor PATH] [--json OUT] [--steps N]

With --reduction: a sum of squares of float32 x at 2^20..2^26 elements, `minitensor bench
reduction --device cuda --json` (the reduction builder, mt::sum(x * x) eager and compiled, a
device copy) beside torch's (x * x).sum() eager and through torch.compile, and torch's copy,
timed with do_bench (medians) in the same run; prints ms, the ratios torch / builder (> 1
means the builder is faster) and each one's GB/s of x read as a % of its own copy's rate
(bytes read and written).

  compare_torch.py --reduction [--minitensor PATH] [--json OUT]
"""
import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from triton.testing import do_bench

import dispatch_compare  # tools/bench/dispatch_compare.py: --dispatch, which needs no torch


@triton.jit
def silu_kernel(x_ptr, y_ptr, n, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offs = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    y = x * tl.sigmoid(x)
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


def triton_silu(x, y):
    n = x.numel()
    grid = (triton.cdiv(n, 1024),)
    silu_kernel[grid](x, y, n, BLOCK_SIZE=1024)
    return y


MLP_SHAPES = [(64, 32, 64), (4096, 1024, 4096)]  # (batch, in, hidden); output dim = in
MLP_CPU_SHAPES = [(64, 32, 64), (512, 256, 512)]


def sync(dev):
    if dev != "cpu":
        torch.cuda.synchronize()


def torch_mlp(batch, d_in, hidden, d_out, lr, dev="cuda", autocast=None):
    """The MLP of examples/mlp.h in torch: its data, parameters and one training step (with
    autocast, e.g. torch.bfloat16: the forward and the loss under torch.autocast, the
    backward and the update outside it, as torch's documentation writes it)."""
    torch.manual_seed(0)
    x = torch.randn(batch, d_in, device=dev)
    teacher = torch.randn(d_in, d_out, device=dev)
    target = F.silu(x) @ teacher + 0.01 * torch.randn(batch, d_out, device=dev)
    w1 = (torch.randn(d_in, hidden, device=dev) / d_in ** 0.5).requires_grad_()
    b1 = torch.zeros(hidden, device=dev, requires_grad=True)
    w2 = (torch.randn(hidden, d_out, device=dev) / hidden ** 0.5).requires_grad_()
    b2 = torch.zeros(d_out, device=dev, requires_grad=True)
    params = [w1, b1, w2, b2]

    def forward_backward_update():
        with (torch.autocast(device_type=dev, dtype=autocast) if autocast
              else contextlib.nullcontext()):
            y = F.silu(x @ w1 + b1) @ w2 + b2
            loss = F.mse_loss(y, target)
        loss.backward()
        with torch.no_grad():
            for p in params:
                p.sub_(p.grad, alpha=lr)
        return loss

    def step():
        loss = forward_backward_update()
        for p in params:
            p.grad = None
        return loss

    return step, forward_backward_update, params


def torch_mlp_ms(batch, d_in, hidden, d_out, steps, warmup, lr, dev="cuda", autocast=None):
    """Median ms per training step of the same MLP in PyTorch eager, and the first and last
    timed losses."""
    step, _, _ = torch_mlp(batch, d_in, hidden, d_out, lr, dev, autocast)

    # Warm up for the steps asked and at least 0.5 s, as `minitensor bench mlp` does.
    t_warm, done = time.perf_counter(), 0
    while done < warmup or time.perf_counter() - t_warm < 0.5:
        step()
        sync(dev)
        done += 1
    ms, losses = [], []
    for _ in range(steps):
        t0 = time.perf_counter()
        loss = step()
        sync(dev)
        ms.append((time.perf_counter() - t0) * 1e3)
        losses.append(loss.detach())
    return statistics.median_high(ms), float(losses[0]), float(losses[-1])


def torch_mlp_compile_ms(batch, d_in, hidden, d_out, steps, lr, dev="cuda"):
    """The MLP step in torch eager, as a captured CUDA graph and through torch.compile:
    median ms per step each, and torch.compile's first call in ms."""
    step, forward_backward_update, params = torch_mlp(batch, d_in, hidden, d_out, lr, dev)

    def timed(fn, n):
        for _ in range(5):
            fn()
        torch.cuda.synchronize()
        ms = []
        for _ in range(n):
            t0 = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            ms.append((time.perf_counter() - t0) * 1e3)
        return statistics.median_high(ms)

    eager_ms = timed(step, steps)
    graph_ms = compile_ms = first_ms = None
    try:  # CUDA graph: warm up on a side stream, capture one whole step, replay it.
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                step()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            forward_backward_update()
        graph_ms = timed(g.replay, steps)
        for p in params:
            p.grad = None
    except Exception as e:  # noqa: BLE001: report it and go on with the other columns
        print(f"torch CUDA graph failed: {e}", file=sys.stderr)
    try:
        compiled = torch.compile(step, mode="reduce-overhead")
        t0 = time.perf_counter()
        compiled()
        torch.cuda.synchronize()
        first_ms = (time.perf_counter() - t0) * 1e3
        compile_ms = timed(compiled, steps)
    except Exception as e:  # noqa: BLE001
        print(f"torch.compile failed: {e}", file=sys.stderr)
    return eager_ms, graph_ms, compile_ms, first_ms


def main_compile(args):
    cmd = [args.minitensor, "bench", "mlp", "--compile", "--device", "cuda", "--json",
           "--shape", "64x32x64"]
    if args.steps:
        cmd += ["--steps", str(args.steps)]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    mt = json.loads(p.stdout) if p.returncode == 0 else None
    if mt is None:
        print(f"minitensor bench mlp --compile failed (exit {p.returncode}); torch figures only",
              file=sys.stderr)
    row = (mt or {}).get("rows", [{}])[0]
    lr = (mt or {}).get("lr", 1e-3)
    eager, graph, comp, first = torch_mlp_compile_ms(64, 32, 64, 32, args.steps or 200, lr)
    mc = row.get("compiled_ms")

    def ratio(v):
        return f"{v / mc:.2f}x" if mc else "-"

    print()
    print(f"MLP training step 64/32/64 (forward, MSE, backward, SGD) on {torch.cuda.get_device_name()}:"
          f" torch {torch.__version__}; ms per step (median); ratio = row / minitensor compiled")
    print("| run | ms/step | ratio |")
    print("|---|---|---|")
    for name, v in (("torch eager", eager), ("torch CUDA graph replay", graph),
                    ("torch.compile(mode=reduce-overhead)", comp),
                    ("minitensor eager", row.get("eager_ms")),
                    ("minitensor mt::compile", mc)):
        print(f"| {name} | {f'{v:.4f}' if v else '-'} | {ratio(v) if v else '-'} |")
    print(f"first call: torch.compile {f'{first:.0f}' if first else '-'} ms; mt::compile {row.get('first_call_ms', float('nan')):.1f} ms"
          f" (a second compile of the same step: {row.get('second_compile_ms', float('nan')):.1f} ms);"
          f" mt::compile parameters vs its eager: {'bitwise' if row.get('bitwise_equal') else row.get('max_param_diff')}")

    silu = []
    for r in (mt or {}).get("silu", []):
        n = 1 << r["log2n"]
        x = torch.randn(n, device="cuda")
        user = lambda: x * torch.sigmoid(x)  # noqa: E731
        tc_ms = torch_compile_ms(user, "x * sigmoid(x)")
        silu.append({**r, "torch_eager_ms": do_bench(user, return_mode="median"),
                     "torch_compile_ms": tc_ms,
                     "torch_silu_ms": do_bench(lambda: F.silu(x), return_mode="median")})
        del x
        torch.cuda.empty_cache()
    print()
    print("x * sigmoid(x), float32: minitensor's compiled (one fused kernel) against mt::silu, and torch")
    print("| n | mt::silu ms | mt compiled ms | compiled/silu | torch eager ms | torch.compile ms |"
          " torch F.silu ms | torch.compile / mt compiled |")
    print("|---|---|---|---|---|---|---|---|")
    for r in silu:
        tcm = r["torch_compile_ms"]
        tc_cell = f"{tcm:.4f}" if tcm else "-"
        tc_ratio = f"{tcm / r['compiled_ms']:.2f}x" if tcm else "-"
        print(f"| 2^{r['log2n']} | {r['silu_ms']:.4f} | {r['compiled_ms']:.4f} |"
              f" {r['compiled_ms'] / r['silu_ms']:.3f} | {r['torch_eager_ms']:.4f} |"
              f" {tc_cell} | {r['torch_silu_ms']:.4f} | {tc_ratio} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"mlp": {"torch_eager_ms": eager, "torch_graph_ms": graph,
                               "torch_compile_ms": comp, "torch_compile_first_ms": first},
                       "silu": silu, "minitensor": mt}, f, indent=1)
    return 0 if mt else 1


def torch_compile_ms(fn, what):
    """do_bench's median ms of torch.compile(fn) after one call; None (and why, on stderr)
    where torch.compile fails."""
    try:
        tc = torch.compile(fn)
        tc()
        return do_bench(tc, return_mode="median")
    except Exception as e:  # noqa: BLE001
        print(f"torch.compile of {what} failed: {e}", file=sys.stderr)
        return None


def main_reduction(args):
    cmd = [args.minitensor, "bench", "reduction", "--device", "cuda", "--json"]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    mt = json.loads(p.stdout) if p.returncode == 0 else None
    if mt is None:
        print(f"minitensor bench reduction failed (exit {p.returncode})", file=sys.stderr)
        return 1
    rows = []
    for r in mt["rows"]:
        n = r["elements"]
        x = torch.randn(n, device="cuda")
        y = torch.empty_like(x)
        eager = lambda: (x * x).sum()  # noqa: E731
        tc_ms = torch_compile_ms(eager, "(x * x).sum()")
        rows.append({**r, "torch_eager_ms": do_bench(eager, return_mode="median"),
                     "torch_compile_ms": tc_ms,
                     "torch_copy_ms": do_bench(lambda: y.copy_(x), return_mode="median")})
        del x, y
        torch.cuda.empty_cache()

    def pct(n, ms, copy_ms):  # GB/s of x read against the copy's bytes read and written
        return f"{100 * (4 * n / ms) / (8 * n / copy_ms):.1f}%"

    print()
    print(f"sum of squares of float32 x on {torch.cuda.get_device_name()}, torch {torch.__version__};"
          " medians in ms; ratio = torch / builder; % = GB/s of x read against the same side's copy")
    print("| n | builder | mt::sum(x*x) compiled | torch eager | torch.compile | eager/builder |"
          " compile/builder | builder % of mt copy | torch.compile % of torch copy |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        n, b, tc = r["elements"], r["builder_ms"], r["torch_compile_ms"]
        print(f"| 2^{n.bit_length() - 1} | {b:.4f} | {r['compiled_ms']:.4f} | {r['torch_eager_ms']:.4f} |"
              f" {f'{tc:.4f}' if tc else '-'} | {r['torch_eager_ms'] / b:.2f}x |"
              f" {f'{tc / b:.2f}x' if tc else '-'} | {pct(n, b, r['copy_ms'])} |"
              f" {pct(n, tc, r['torch_copy_ms']) if tc else '-'} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "where": mt.get("where")}, f, indent=1)
    return 0


def main_mlp(args):
    dev = args.device
    shapes = MLP_CPU_SHAPES if dev == "cpu" else MLP_SHAPES
    if dev == "cpu":
        # minitensor's count: MT_NUM_THREADS, else the CPUs this process may run on.
        threads = len(os.sched_getaffinity(0))
        if os.environ.get("MT_NUM_THREADS", "").isdigit():
            threads = min(threads, max(1, int(os.environ["MT_NUM_THREADS"])))
        torch.set_num_threads(threads)
    mt = None
    if args.mt_json:
        with open(args.mt_json) as f:
            mt = json.load(f)
    else:
        cmd = [args.minitensor, "bench", "mlp", "--device", dev, "--json"]
        for b, i, h in shapes:
            cmd += ["--shape", f"{b}x{i}x{h}"]
        if args.steps:
            cmd += ["--steps", str(args.steps)]
        if args.warmup is not None:
            cmd += ["--warmup", str(args.warmup)]
        if args.autocast:
            cmd += ["--autocast", args.autocast]
        p = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
        if p.returncode == 0:
            mt = json.loads(p.stdout)
        else:
            print(f"minitensor bench mlp failed (exit {p.returncode}); torch figures only",
                  file=sys.stderr)
    mt_rows = {(r["batch"], r["in"], r["hidden"]): r for r in (mt or {}).get("rows", [])}
    lr = (mt or {}).get("lr", 1e-3)
    steps = args.steps or 50
    warmup = 5 if args.warmup is None else args.warmup
    results = []
    for b, i, h in shapes:
        r = mt_rows.get((b, i, h))
        d_out = r["out"] if r else i
        t_ms, l0, l1 = torch_mlp_ms(b, i, h, d_out, steps, warmup, lr, dev,
                                    getattr(torch, args.autocast) if args.autocast else None)
        results.append({"batch": b, "in": i, "hidden": h, "out": d_out, "torch_ms": t_ms,
                        "torch_loss_first": l0, "torch_loss_last": l1,
                        "mt_ms": r["ms_median"] if r else None,
                        "mt_loss_first": r["loss_first"] if r else None,
                        "mt_loss_last": r["loss_last"] if r else None})
        if dev != "cpu":
            torch.cuda.empty_cache()

    print()
    if dev == "cpu":
        print(f"MLP training step on the CPU ({len(os.sched_getaffinity(0))} usable CPUs):"
              f" torch {torch.__version__} eager with {torch.get_num_threads()} threads,"
              f" minitensor: {(mt or {}).get('where', 'did not run')}")
    else:
        print(f"MLP training step on {torch.cuda.get_device_name()}: torch {torch.__version__} eager"
              f" (TF32 matmul {'on' if torch.backends.cuda.matmul.allow_tf32 else 'off'}"
              f"{', autocast ' + args.autocast if args.autocast else ''}),"
              f" minitensor: {(mt or {}).get('where', 'did not run')}")
    print("| batch/in/hidden | out | minitensor ms/step | torch ms/step | torch/mt |"
          " loss mt (first -> last) | loss torch (first -> last) |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        m, t = r["mt_ms"], r["torch_ms"]
        ratio = f"{t / m:.2f}x" if m else "-"
        mloss = (f"{r['mt_loss_first']:.4g} -> {r['mt_loss_last']:.4g}"
                 if r["mt_loss_first"] is not None else "-")
        print(f"| {r['batch']}/{r['in']}/{r['hidden']} | {r['out']} |"
              f" {f'{m:.3f}' if m else '-'} | {t:.3f} | {ratio} | {mloss} |"
              f" {r['torch_loss_first']:.4g} -> {r['torch_loss_last']:.4g} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"mlp": results, "minitensor": mt}, f, indent=1)
    return 0 if mt else 1


def busy_loop(until):
    while time.time() < until:
        pass


def torch_silu_contended(seconds=3.0):
    """Median ms of torch's F.silu on 2^20 floats with 1 and with all usable CPUs' threads,
    beside a busy-loop process on every usable CPU."""
    import multiprocessing
    cpus = len(os.sched_getaffinity(0))
    x = torch.randn(1 << 20)
    until = time.time() + seconds + 30
    loops = [multiprocessing.Process(target=busy_loop, args=(until,)) for _ in range(cpus)]
    for p in loops:
        p.start()
    try:
        times = {1: [], cpus: []}
        t_end = time.perf_counter() + seconds
        while time.perf_counter() < t_end or len(times[1]) < 20:
            for t in (1, cpus):
                torch.set_num_threads(t)
                torch.nn.functional.silu(x, inplace=False)  # after the switch, untimed
                for _ in range(10):
                    t0 = time.perf_counter()
                    torch.nn.functional.silu(x)
                    times[t].append((time.perf_counter() - t0) * 1e3)
    finally:
        for p in loops:
            p.terminate()
            p.join()
    return cpus, statistics.median(times[1]), statistics.median(times[cpus])


def main_cpu_contended(args):
    cpus, t1, tn = torch_silu_contended()
    cmd = [args.minitensor, "bench", "cpu", "--contended", "--op", "silu", "--json"]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    mt = json.loads(p.stdout) if p.returncode == 0 else None
    print(f"SiLU on 2^20 float32 on the CPU beside a busy loop on each of {cpus} CPUs; median ms")
    print("| library | 1 thread | {} threads | ratio |".format(cpus))
    print("|---|---|---|---|")
    print(f"| torch {torch.__version__} | {t1:.4f} | {tn:.4f} | {tn / t1:.2f} |")
    if mt:
        r = mt["rows"][0]
        print(f"| minitensor | {r['single_ms']:.4f} | {r['multi_ms']:.4f} | {r['ratio']:.2f} |")
    else:
        print(f"| minitensor | failed (exit {p.returncode}) | | |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch": {"threads": cpus, "single_ms": t1, "multi_ms": tn},
                       "minitensor": mt}, f, indent=1)
    return 0 if mt else 1


def main_dispatch(args):
    return dispatch_compare.main_dispatch(args, torch.__version__)


def torch_laplacian_forms(n, dev="cuda"):
    """do_bench medians (ms) of torch's 7-point stencils on one float32 n^3 grid."""
    u = torch.randn(1, 1, n, n, n, device=dev)
    w = torch.zeros(1, 1, 3, 3, 3, device=dev)
    w[0, 0, 1, 1, 1] = -6
    for d in ((0, 1, 1), (2, 1, 1), (1, 0, 1), (1, 2, 1), (1, 1, 0), (1, 1, 2)):
        w[(0, 0) + d] = 1

    def sliced(mode):
        p = F.pad(u, (1, 1, 1, 1, 1, 1), mode=mode)[0, 0]
        c = p[1:-1, 1:-1, 1:-1]
        return (p[2:, 1:-1, 1:-1] + p[:-2, 1:-1, 1:-1] + p[1:-1, 2:, 1:-1] + p[1:-1, :-2, 1:-1]
                + p[1:-1, 1:-1, 2:] + p[1:-1, 1:-1, :-2] - 6 * c)

    # The forms agree with each other (zero boundary), so each times the same stencil.
    ref = F.conv3d(u, w, padding=1)[0, 0]
    err = (sliced("constant") - ref).abs().max().item()
    dst = torch.empty_like(u)
    out = {
        "conv3d": do_bench(lambda: F.conv3d(u, w, padding=1), return_mode="median"),
        "sliced": do_bench(lambda: sliced("constant"), return_mode="median"),
        "sliced_periodic": do_bench(lambda: sliced("circular"), return_mode="median"),
        "copy": do_bench(lambda: dst.copy_(u), return_mode="median"),
        "forms_max_diff": err,
    }
    del u, dst, ref
    torch.cuda.empty_cache()
    return out


def torch_embedding_bag(V, D, bags, bag, dtype="float32", dev="cuda"):
    """do_bench medians (ms) of F.embedding_bag (sum) forward and backward (dense grad)."""
    w = torch.randn(V, D, device=dev).to(getattr(torch, dtype)).requires_grad_()
    idx = torch.randint(0, V, (bags * bag,), device=dev)
    off = torch.arange(0, bags * bag, bag, device=dev)
    g = torch.randn(bags, D, device=dev).to(w.dtype)
    fwd = do_bench(lambda: F.embedding_bag(idx, w, off, mode="sum"), return_mode="median")

    def step():
        w.grad = None
        F.embedding_bag(idx, w, off, mode="sum").backward(g)

    both = do_bench(step, return_mode="median")
    del w, idx, off, g
    torch.cuda.empty_cache()
    return {"fwd": fwd, "bwd": both - fwd}


def main_emb_agg(args):
    p = subprocess.run([args.emb_agg_bench, "--json", "--stages"], stdout=subprocess.PIPE,
                       text=True)
    if p.returncode != 0:
        print(f"{args.emb_agg_bench} failed (exit {p.returncode})", file=sys.stderr)
        return None
    mt = json.loads(p.stdout)
    results = []
    for r in mt["rows"]:
        t = torch_embedding_bag(r["V"], r["D"], r["bags"], r["bag"], r.get("dtype", "float32"))
        results.append({**r, "torch_fwd_ms": t["fwd"], "torch_bwd_ms": t["bwd"]})
    print()
    print(f"deeprec::emb_agg (sum) on {torch.cuda.get_device_name()}, medians in ms "
          f"(backward = forward + backward less the forward; det = deterministic=true, the "
          f"sorted-segment path, which bfloat16 always takes; fill = zero-fill of the [V, D] "
          f"gradient; ratio = torch / minitensor)")
    print("| dtype | V | D | bags x bag | mt fwd | gather floor | mt/floor | torch fwd | torch/mt |"
          " mt bwd | mt bwd det | fill | torch bwd | torch/mt bwd | torch/mt det |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r.get('dtype', 'float32')} | {r['V']} | {r['D']} | {r['bags']} x {r['bag']} |"
              f" {r['fwd_ms']:.4f} | {r['floor_ms']:.4f} | {r['fwd_ms'] / r['floor_ms']:.2f}x |"
              f" {r['torch_fwd_ms']:.4f} | {r['torch_fwd_ms'] / r['fwd_ms']:.2f}x |"
              f" {r['bwd_ms']:.4f} | {r['bwd_det_ms']:.4f} | {r['fill_ms']:.4f} |"
              f" {r['torch_bwd_ms']:.4f} | {r['torch_bwd_ms'] / r['bwd_ms']:.2f}x |"
              f" {r['torch_bwd_ms'] / r['bwd_det_ms']:.2f}x |")
    for r in results:
        if r.get("stages"):
            print(f"deterministic path's kernels, float32, V={r['V']} D={r['D']} "
                  f"(ms each, CUDA events around each launch): " +
                  ", ".join(f"{k} {ms:.4f}" for k, ms in r["stages"]) +
                  f"; sum {sum(ms for _, ms in r['stages']):.4f}")
    return results


def main_scenarios(args):
    p = subprocess.run([args.laplacian_bench, "--json"], stdout=subprocess.PIPE, text=True)
    if p.returncode != 0:
        print(f"{args.laplacian_bench} failed (exit {p.returncode})", file=sys.stderr)
        return 1
    mt = json.loads(p.stdout)
    by_n = {}
    for r in mt["rows"]:
        by_n.setdefault(r["n"], {})[r["what"]] = r
    results = []
    for n in sorted(by_n):
        t = torch_laplacian_forms(n)
        m = by_n[n]
        results.append({"n": n, "mt": {k: v["ms"] for k, v in m.items()},
                        "mt_copy": next(iter(m.values()))["copy_ms"], "torch": t})

    print()
    print(f"pde::laplacian3d (float32, one N^3 grid) on {torch.cuda.get_device_name()}, "
          f"torch {torch.__version__}, medians in ms (ratio = torch / minitensor op, > 1 means "
          f"minitensor is faster)")
    print("| N | mt op ms | GB/s | mt % of copy | mt periodic ms | mt x-chunk 1 ms | mt tiled ms |"
          " mt naive ms | copy ms | torch conv3d ms | conv3d/mt | torch sliced ms | sliced/mt |"
          " torch sliced periodic ms | periodic/mt periodic |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        n, mm, t = r["n"], r["mt"], r["torch"]
        op, per, naive = mm.get("op zero"), mm.get("op periodic"), mm.get("naive zero")
        gbs = 2 * n ** 3 * 4 / (op * 1e6)
        x1, tiled = mm.get("stream x1 zero", float("nan")), mm.get("tiled zero", float("nan"))
        print(f"| {n} | {op:.4f} | {gbs:.0f} | {100 * r['mt_copy'] / op:.0f}% | {per:.4f} |"
              f" {x1:.4f} | {tiled:.4f} | {naive:.4f} | {r['mt_copy']:.4f} | {t['conv3d']:.4f} | {t['conv3d'] / op:.1f}x |"
              f" {t['sliced']:.4f} | {t['sliced'] / op:.1f}x | {t['sliced_periodic']:.4f} |"
              f" {t['sliced_periodic'] / per:.1f}x |")
    copies = ", ".join(f"N={r['n']}: {r['torch']['copy']:.4f} ms" for r in results)
    print(f"(torch's copy of the same bytes: {copies}; sliced vs conv3d max |diff|: "
          f"{max(r['torch']['forms_max_diff'] for r in results):.2g})")
    emb = main_emb_agg(args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"laplacian3d": results, "minitensor": mt, "emb_agg": emb}, f, indent=1)
    return 0 if emb is not None else 1


def torch_attention(B, H, S, D, causal, dtype, dev="cuda"):
    """do_bench medians (ms) of SDPA forward and backward and of the unfused forward."""
    q, k, v = (torch.randn(B, H, S, D, device=dev, dtype=dtype, requires_grad=True)
               for _ in range(3))
    g = torch.randn(B, H, S, D, device=dev, dtype=dtype)
    sdpa = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    fwd = do_bench(sdpa, return_mode="median")
    out = sdpa()
    bwd = do_bench(lambda: torch.autograd.grad(out, (q, k, v), g, retain_graph=True),
                   return_mode="median")
    unfused = None
    if B * H * S * S * 2 <= 8 << 30:  # the S x S scores must fit
        mask = torch.ones(S, S, device=dev, dtype=torch.bool).tril() if causal else None

        def naive():
            s = (q @ k.transpose(-2, -1)) * D ** -0.5
            if mask is not None:
                s = s.masked_fill(~mask, float("-inf"))
            return torch.softmax(s, dim=-1) @ v

        with torch.no_grad():
            unfused = do_bench(naive, return_mode="median")
        del mask
    del q, k, v, g, out
    torch.cuda.empty_cache()
    return {"fwd": fwd, "bwd": bwd, "unfused": unfused}


def bench_json(path):
    """The JSON that `path --json` prints, or None (said on stderr) if it fails."""
    p = subprocess.run([path, "--json"], stdout=subprocess.PIPE, text=True)
    if p.returncode != 0:
        print(f"{path} failed (exit {p.returncode})", file=sys.stderr)
        return None
    return json.loads(p.stdout)


def main_attention(args):
    mt = bench_json(args.flash_attn_bench)
    if mt is None:
        return 1
    dtype = torch.float16 if mt["dtype"] == "float16" else torch.bfloat16
    results = []
    for r in mt["rows"]:
        t = torch_attention(r["B"], r["H"], r["S"], r["D"], r["causal"], dtype)
        results.append({**r, "torch": t})
    print()
    print(f"mha::flash_attn ({mt['dtype']}) on {torch.cuda.get_device_name()}, torch "
          f"{torch.__version__}, medians in ms; TFLOP/s: forward 4 B H S^2 D (half when causal), "
          f"backward 2.5x that; ratio = torch / minitensor (> 1: minitensor is faster)")
    print("| B, H, S, D | causal | mt fwd | TFLOP/s | SDPA fwd | TFLOP/s | SDPA/mt |"
          " mt bwd | TFLOP/s | SDPA bwd | SDPA/mt | unfused fwd | unfused/mt |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        t = r["torch"]
        f = 4 * r["B"] * r["H"] * r["S"] ** 2 * r["D"] * (0.5 if r["causal"] else 1)
        tf = lambda ms, mul=1: mul * f / (ms * 1e9)
        un = t["unfused"]
        uns = f"{un:.3f} | {un / r['fwd_ms']:.1f}x" if un else "- | -"
        print(f"| {r['B']}, {r['H']}, {r['S']}, {r['D']} | {'yes' if r['causal'] else 'no'} |"
              f" {r['fwd_ms']:.4f} | {tf(r['fwd_ms']):.0f} | {t['fwd']:.4f} | {tf(t['fwd']):.0f} |"
              f" {t['fwd'] / r['fwd_ms']:.2f}x | {r['bwd_ms']:.4f} | {tf(r['bwd_ms'], 2.5):.0f} |"
              f" {t['bwd']:.4f} | {t['bwd'] / r['bwd_ms']:.2f}x | {uns} |")
    if "registers" in mt:
        print("(mt registers a thread, tensor-core kernels: " + ", ".join(
            f"{d}: fwd {v['fwd']}, bwd {v['bwd']}" for d, v in mt["registers"].items()) + ")")
    name = lambda r: f"{r['S']}/{r['D']}/{'causal' if r['causal'] else 'full'}"
    # The mt columns run what the autotuner chose; the bench also times each candidate forced.
    if any("fwd_choice" in r for r in results):
        print("(mt autotuner's choices: " + ", ".join(
            f"{name(r)}: {r['fwd_choice']}, {r['bwd_choice']}" for r in results
            if "fwd_choice" in r) + ")")
    for label, keys in (("forward, 2 / 1 row tiles a warp", ("fwd_two_row_tiles_ms",
                                                               "fwd_one_row_tile_ms")),
                        ("backward, blocks of 8 / 4 warps", ("bwd_8_warps_ms", "bwd_4_warps_ms"))):
        alt = [f"{name(r)}: " + " / ".join(f"{r[k]:.4f}" for k in keys)
               for r in results if all(r.get(k, -1) > 0 for k in keys)]
        if alt:
            print(f"(mt {label}, each forced, ms: " + ", ".join(alt) + ")")
    # The wgmma forward (compute capability 9.0; opt-in by MHA_FLASH_ATTN_FWD_KERNEL=sm90).
    sm90 = [r for r in results if r.get("fwd_sm90_ms", -1) > 0]
    if sm90:
        print("| B, H, S, D | causal | mt sm90 fwd | TFLOP/s | mt sm90-serial fwd | TFLOP/s |"
              " mt mma fwd | TFLOP/s | SDPA fwd | TFLOP/s | SDPA/sm90 |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for r in sm90:
            f = 4 * r["B"] * r["H"] * r["S"] ** 2 * r["D"] * (0.5 if r["causal"] else 1)
            tf = lambda ms: f / (ms * 1e9)
            s90, ser = r["fwd_sm90_ms"], r.get("fwd_sm90_serial_ms", -1)
            mma, sd = r["fwd_ms"], r["torch"]["fwd"]
            sers = f"{ser:.4f} | {tf(ser):.0f}" if ser > 0 else "- | -"
            print(f"| {r['B']}, {r['H']}, {r['S']}, {r['D']} | {'yes' if r['causal'] else 'no'} |"
                  f" {s90:.4f} | {tf(s90):.0f} | {sers} | {mma:.4f} | {tf(mma):.0f} | {sd:.4f} |"
                  f" {tf(sd):.0f} | {sd / s90:.2f}x |")
        if "registers" in mt:
            print("(mt registers a thread, wgmma forward: " + ", ".join(
                f"{d}: {v.get('fwd_sm90', -1)}" for d, v in mt["registers"].items()) + ")")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"flash_attn": results, "torch": torch.__version__}, f, indent=1)
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", default="build/tools/bench_silu")
    ap.add_argument("--json", default="")
    ap.add_argument("--mt-json", default="", help="reuse an existing bench_silu JSON")
    ap.add_argument("--max-log2", type=int, default=28)
    ap.add_argument("--mlp", action="store_true", help="the MLP training step instead of SiLU")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                    help="--mlp: where both run (cpu: torch with minitensor's thread count)")
    ap.add_argument("--cpu-contended", action="store_true",
                    help="CPU SiLU at 1 and all threads beside busy loops: torch and minitensor")
    ap.add_argument("--minitensor", default="build/tools/minitensor")
    ap.add_argument("--steps", type=int, default=0, help="--mlp: timed steps (default 50)")
    ap.add_argument("--autocast", choices=["bfloat16", "float16"], default=None,
                    help="--mlp: each step under autocast to this dtype (minitensor: --autocast)")
    ap.add_argument("--warmup", type=int, default=None, help="--mlp: warm-up steps (default 5)")
    ap.add_argument("--dispatch", action="store_true",
                    help="host cost of one call against libtorch C++ (tools/bench/bench_libtorch.cpp)")
    ap.add_argument("--libtorch-bench", default="build-gpu/tools/bench_libtorch")
    ap.add_argument("--rounds", type=int, default=5, help="--dispatch: rounds")
    ap.add_argument("--interleaved", action="store_true",
                    help="--dispatch: --libtorch-bench is the -DMT_INTERLEAVED build, which times"
                         " both sides loop by loop in one process")
    ap.add_argument("--compile", action="store_true",
                    help="the MLP step and x * sigmoid(x): torch eager, CUDA graph, torch.compile"
                         " against mt::compile")
    ap.add_argument("--reduction", action="store_true",
                    help="a sum of squares: the reduction builder against torch's (x * x).sum()")
    ap.add_argument("--scenarios", action="store_true",
                    help="the application scenarios of examples/ops against torch's forms")
    ap.add_argument("--laplacian-bench", default="build/examples/ops/laplacian3d/laplacian3d_bench")
    ap.add_argument("--emb-agg-bench", default="build/examples/ops/emb_agg/emb_agg_bench")
    ap.add_argument("--attention", action="store_true",
                    help="mha::flash_attn against torch's SDPA and the unfused form")
    ap.add_argument("--flash-attn-bench",
                    default="build/examples/ops/flash_attn/flash_attn_bench")
    args = ap.parse_args()
    if args.compile:
        return main_compile(args)
    if args.reduction:
        return main_reduction(args)
    if args.scenarios:
        return main_scenarios(args)
    if args.attention:
        return main_attention(args)
    if args.dispatch:
        return main_dispatch(args)
    if args.mlp:
        return main_mlp(args)
    if args.cpu_contended:
        return main_cpu_contended(args)

    mt_json = args.mt_json or os.path.join(os.environ.get("OUT", "/tmp"), "bench_silu.json")
    if not args.mt_json:
        subprocess.run([args.bench, "--json", mt_json, "--max-log2", str(args.max_log2)],
                       check=True, stdout=sys.stderr)
    with open(mt_json) as f:
        mt = json.load(f)
    mt_ms = {(r["dtype"], r["pass"], r["log2n"]): r for r in mt["rows"]}

    dev = "cuda"
    results = []
    for dtname, dt in (("float32", torch.float32), ("bfloat16", torch.bfloat16)):
        for lg in range(12, args.max_log2 + 1, 2):
            n = 1 << lg
            x = torch.randn(n, device=dev, dtype=dt)
            g = torch.randn(n, device=dev, dtype=dt)
            y = torch.empty_like(x)
            fwd = {
                "torch_silu": do_bench(lambda: F.silu(x), return_mode="median"),
                "x_sigmoid": do_bench(lambda: x * torch.sigmoid(x), return_mode="median"),
                "triton": do_bench(lambda: triton_silu(x, y), return_mode="median"),
            }
            bwd = {
                "torch_silu_backward": do_bench(lambda: torch.ops.aten.silu_backward(g, x),
                                                return_mode="median"),
            }
            for pas, d in (("fwd", fwd), ("bwd", bwd)):
                r = mt_ms.get((dtname, pas, lg))
                row = {"dtype": dtname, "pass": pas, "log2n": lg, **d}
                if r:
                    row["mt"] = r["ms"]
                    row["mt_unfused"] = r["unfused_ms"]
                    row["mt_pct_copy"] = r["pct_copy"]
                    row["mt_op"] = r.get("op_ms")
                    row["user_pointwise"] = r.get("user_pointwise_ms")
                    row["user_raw"] = r.get("user_raw_ms")
                results.append(row)
            del x, g, y
    torch.cuda.empty_cache()

    print()
    print("| dtype | pass | n | minitensor ms | torch ms | torch/mt | triton ms | triton/mt |"
          " x*sigmoid ms | x*sig/mt | mt unfused/mt | mt % of copy |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        m = r.get("mt")
        tm = r.get("torch_silu", r.get("torch_silu_backward"))
        tr = r.get("triton")
        xs = r.get("x_sigmoid")

        def f(v):
            return f"{v:.4f}" if v is not None else "-"

        def ratio(v):
            return f"{v / m:.2f}x" if (v is not None and m) else "-"

        print(f"| {r['dtype']} | {r['pass']} | 2^{r['log2n']} | {f(m)} | {f(tm)} | {ratio(tm)} |"
              f" {f(tr)} | {ratio(tr)} | {f(xs)} | {ratio(xs)} |"
              f" {ratio(r.get('mt_unfused'))} | {r.get('mt_pct_copy', 0):.1f} |")
    print()
    print("A user's SiLU in minitensor (pointwise builder, raw typed-launch kernel) against the\n"
          "built-in mt::silu called as an op, torch and Triton, in the same run:")
    print("| dtype | pass | n | mt op ms | user pointwise ms | pointwise/op | user raw ms |"
          " raw/op | torch ms | torch/pointwise | triton ms | triton/pointwise |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        op, pw, raw = r.get("mt_op"), r.get("user_pointwise"), r.get("user_raw")
        tm = r.get("torch_silu", r.get("torch_silu_backward"))
        tr = r.get("triton")

        def g(v):
            return f"{v:.4f}" if v is not None else "-"

        def over(a, b):
            return f"{a / b:.3f}x" if (a is not None and b) else "-"

        print(f"| {r['dtype']} | {r['pass']} | 2^{r['log2n']} | {g(op)} | {g(pw)} | {over(pw, op)} |"
              f" {g(raw)} | {over(raw, op)} | {g(tm)} | {over(tm, pw)} | {g(tr)} | {over(tr, pw)} |")
    print()
    print(f"minitensor host cost us/call: {mt.get('host_us')}")
    print(f"minitensor JIT ms: {mt.get('jit_ms')}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": results, "minitensor": mt}, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
