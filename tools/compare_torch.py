#!/usr/bin/env python3
"""SiLU on the GPU: PyTorch, the tutorial-style Triton kernel and minitensor side by side.

Times with triton.testing.do_bench (medians, ms) at the sizes bench_silu uses:
torch F.silu, torch.ops.aten.silu_backward, x * torch.sigmoid(x), and a standard
@triton.jit elementwise SiLU (BLOCK_SIZE 1024); runs build/tools/bench_silu --json in
the same run and prints one ratio table (ratio = other / minitensor: > 1 means
minitensor is faster).

  compare_torch.py [--bench PATH] [--json OUT] [--max-log2 K] [--mt-json EXISTING]
"""
import argparse
import json
import os
import subprocess
import sys

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from triton.testing import do_bench


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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", default="build/tools/bench_silu")
    ap.add_argument("--json", default="")
    ap.add_argument("--mt-json", default="", help="reuse an existing bench_silu JSON")
    ap.add_argument("--max-log2", type=int, default=28)
    args = ap.parse_args()

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
    print(f"minitensor host cost us/call: {mt.get('host_us')}")
    print(f"minitensor JIT ms: {mt.get('jit_ms')}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": results, "minitensor": mt}, f, indent=1)


if __name__ == "__main__":
    main()
