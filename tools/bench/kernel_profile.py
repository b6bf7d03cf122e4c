#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The CUDA kernels of one MLP training step, minitensor's beside torch's, timed by Nsight
Compute (ncu): which kernels each step launches and how long each takes on the GPU.

  kernel_profile.py --minitensor build-gpu/tools/minitensor [--shape 4096x1024x4096]
                    [--autocast bfloat16] [--json OUT]

Each side runs a few identical training steps under `ncu --metrics gpu__time_duration.sum`
(clocks and caches left as they are: --clock-control none --cache-control none), and the
last step is found as the period of the kernel-name sequence (the steps launch the same
kernels). Printed: each side's kernels of that step in launch order with their time, the
sum per kernel family (GEMM, cast, elementwise, reduction, other), and the totals. The sum
of kernel times is the step's GPU time; what a step takes beyond it is host time and gaps.
"""
import argparse
import csv
import io
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

TORCH_DRIVER = r"""
import sys, torch
sys.path.insert(0, {here!r})
import compare_torch as ct
step, _, _ = ct.torch_mlp({batch}, {d_in}, {hidden}, {d_out}, 0.01, "cuda", {autocast})
for _ in range({steps}):
    step()
torch.cuda.synchronize()
"""


def ncu(cmd):
    full = ["ncu", "--metrics", "gpu__time_duration.sum", "--csv", "--print-units", "base",
            "--clock-control", "none", "--cache-control", "none", "--target-processes", "all"] + cmd
    p = subprocess.run(full, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"kernel_profile: ncu failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    text = p.stdout
    start = text.find('"ID"')
    if start < 0:
        sys.exit(f"kernel_profile: no ncu table in the output:\n{text[-3000:]}")
    rows = []
    for r in csv.DictReader(io.StringIO(text[start:])):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        rows.append((r["Kernel Name"], float(r["Metric Value"].replace(",", "")) / 1e3))  # ns -> us
    return rows


def last_period(rows):
    """The last step: the shortest p such that the last three blocks of p names repeat and a
    block holds a GEMM (every training step has one; a run of equal kernels at the end, as
    torch's per-parameter update, would otherwise read as a period of 1)."""
    names = [n for n, _ in rows]
    for p in range(1, len(names) // 3 + 1):
        if (names[-p:] == names[-2 * p:-p] == names[-3 * p:-2 * p]
                and any(family(n) == "gemm" for n in names[-p:])):
            return rows[-p:]
    sys.exit("kernel_profile: the kernel sequence has no period over three steps")


FAMILIES = [
    ("gemm", re.compile(r"gemm|sm90_|cutlass|nvjet|xmma|matmul", re.I)),
    ("cast", re.compile(r"cast|copy|convert|to_dtype", re.I)),
    ("reduction", re.compile(r"reduce|sum|mean|norm", re.I)),
    ("elementwise", re.compile(r"elementwise|vectorized|pointwise|silu|add|mul|unrolled|foreach|fill", re.I)),
]


def family(name):
    for fam, rx in FAMILIES:
        if rx.search(name):
            return fam
    return "other"


def short(name, width=70):
    name = re.sub(r"\s+", " ", name)
    return name if len(name) <= width else name[:width - 3] + "..."


def report(label, rows):
    print(f"\n{label}: {len(rows)} kernels, {sum(t for _, t in rows):.1f} us of GPU time in one step")
    for i, (n, t) in enumerate(rows):
        print(f"  {i:3d} {t:9.1f} us  [{family(n):11s}] {short(n)}")
    fams = {}
    for n, t in rows:
        c, s = fams.get(family(n), (0, 0.0))
        fams[family(n)] = (c + 1, s + t)
    return fams


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minitensor", required=True, help="the minitensor command (built with CUDA)")
    ap.add_argument("--shape", default="4096x1024x4096", help="BATCHxINxHIDDEN (output dim = IN)")
    ap.add_argument("--autocast", choices=["bfloat16", "float16"], default=None)
    ap.add_argument("--json", help="write both sides' kernels and sums here")
    args = ap.parse_args()
    batch, d_in, hidden = (int(v) for v in args.shape.split("x"))

    # bench mlp with --max-seconds this small warms up one step and times its minimum of 3.
    mt_cmd = [args.minitensor, "bench", "mlp", "--device", "cuda", "--shape", args.shape,
              "--warmup", "1", "--max-seconds", "0.001"]
    if args.autocast:
        mt_cmd += ["--autocast", args.autocast]
    torch_code = TORCH_DRIVER.format(here=HERE, batch=batch, d_in=d_in, hidden=hidden, d_out=d_in,
                                     autocast=f"torch.{args.autocast}" if args.autocast else None,
                                     steps=4)
    mt = last_period(ncu(mt_cmd))
    th = last_period(ncu([sys.executable, "-c", torch_code]))
    f_mt = report("minitensor", mt)
    f_th = report("torch", th)
    print(f"\nper family (us in one step; shape {args.shape}, autocast {args.autocast or 'off'}):")
    print(f"  {'family':12s} {'minitensor':>18s} {'torch':>18s}")
    for fam in sorted(set(f_mt) | set(f_th)):
        a, b = f_mt.get(fam, (0, 0.0)), f_th.get(fam, (0, 0.0))
        print(f"  {fam:12s} {a[1]:10.1f} ({a[0]:3d}) {b[1]:10.1f} ({b[0]:3d})")
    tot_mt, tot_th = sum(t for _, t in mt), sum(t for _, t in th)
    print(f"  {'total':12s} {tot_mt:10.1f} ({len(mt):3d}) {tot_th:10.1f} ({len(th):3d})"
          f"   torch/minitensor {tot_th / tot_mt:.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"shape": args.shape, "autocast": args.autocast,
                       "minitensor": [{"kernel": n, "us": t} for n, t in mt],
                       "torch": [{"kernel": n, "us": t} for n, t in th]}, f, indent=1)


if __name__ == "__main__":
    main()
