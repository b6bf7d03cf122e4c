#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""bench_compile_cpu of two builds side by side: this tree (A) against another (B).

Runs `A REPS` and `B REPS` alternately (A and B are bench_compile_cpu executables; each run
prints every row as medians of REPS timed calls), --rounds times each, and prints per row
and column the median over the rounds of each side, their ratio A / B, and the range of the
per-round ratios (rows and columns matched by name; those only one build prints are left
out). The ratio columns (eager / fused, pointwise / silu) are within one run, so a noisy
host moves them less than the times:

  compile_cpu_ab.py A_BENCH B_BENCH [--rounds N] [--reps R] [--thread-time] [--json OUT]
                    [--label-b NAME]

Set MT_NUM_THREADS=1 for one thread; run on a host as quiet as you have.
"""
import argparse
import json
import re
import statistics
import subprocess
import sys


def run(exe, reps, extra):
    """{row label: {column: number}} from one run's markdown tables."""
    out = subprocess.run([exe, str(reps)] + extra, check=True, capture_output=True,
                         text=True).stdout
    rows, header = {}, None
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("|") or set(line) <= set("|-"):
            continue
        if not re.match(r"^[\d.]+x?$", cells[-1]):
            header = cells
            continue
        label = cells[0] if header is None or header[0].startswith("function") else \
            f"{header[0]} {cells[0]}"
        rows[label] = {col: float(c.rstrip("x")) for col, c in zip(header[1:], cells[1:])}
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--json", default="")
    ap.add_argument("--label-b", default="before")
    ap.add_argument("--thread-time", action="store_true",
                    help="pass --thread-time: the calling thread's CPU clock (one thread)")
    args = ap.parse_args()
    extra = ["--thread-time"] if args.thread_time else []
    runs_a, runs_b = [], []
    for r in range(args.rounds):
        # Alternate which side goes first, so a drift over the run weighs on both alike.
        first, second = (args.a, args.b) if r % 2 == 0 else (args.b, args.a)
        x, y = run(first, args.reps, extra), run(second, args.reps, extra)
        a, b = (x, y) if r % 2 == 0 else (y, x)
        runs_a.append(a)
        runs_b.append(b)
        print(f"[compile_cpu_ab] round {r + 1}/{args.rounds} done", file=sys.stderr)
    print(f"bench_compile_cpu: median of {args.rounds} alternating rounds a side "
          f"(each a median of {args.reps} or more calls; "
          f"{'thread CPU time' if args.thread_time else 'wall clock'})")
    print(f"| row | column | this tree | {args.label_b} | this / {args.label_b} | "
          "per-round ratio range |")
    print("|---|---|---|---|---|---|")
    out = []
    for label, cols in runs_a[0].items():
        for col in cols:
            if col not in runs_b[0].get(label, {}):
                continue  # a row or column the other build does not print
            a = [run[label][col] for run in runs_a]
            b = [run[label][col] for run in runs_b]
            ma, mb = statistics.median(a), statistics.median(b)
            ratios = [x / y for x, y in zip(a, b) if y > 0]
            rng = f"{min(ratios):.2f} to {max(ratios):.2f}" if ratios else "-"
            ratio = f"{ma / mb:.2f}" if mb > 0 else "-"
            print(f"| {label} | {col} | {ma:.4g} | {mb:.4g} | {ratio} | {rng} |")
            out.append({"row": label, "column": col, "this": a, args.label_b: b})
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
