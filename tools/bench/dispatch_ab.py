#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""`bench dispatch` of two minitensor builds side by side: this tree (A) against another (B).

Runs `A bench dispatch --json` and `B bench dispatch --json` alternately, --rounds times each
(each run's row the median of bench dispatch's 5 timed loops), and prints per row the median
over the rounds of each side, their ratio A / B, and the range of the per-round ratios, so a
change's host cost can be read against the tree before it (issue 42's goal: within 2%):

  dispatch_ab.py A_MINITENSOR B_MINITENSOR [--rounds N] [--json OUT] [--label-b NAME]

Run both pinned to one CPU (taskset) on a quiet host; the ratio range says what it resolves.
"""
import argparse
import json
import statistics
import subprocess
import sys


def run(exe):
    out = subprocess.run([exe, "bench", "dispatch", "--json"], check=True, capture_output=True,
                         text=True).stdout
    return json.loads(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--json", default="")
    ap.add_argument("--label-b", default="before")
    args = ap.parse_args()
    runs_a, runs_b = [], []
    for r in range(args.rounds):
        # Alternate which side goes first, so a drift over the run weighs on both alike.
        first, second = (args.a, args.b) if r % 2 == 0 else (args.b, args.a)
        x, y = run(first), run(second)
        a, b = (x, y) if r % 2 == 0 else (y, x)
        runs_a.append(a)
        runs_b.append(b)
        print(f"[dispatch_ab] round {r + 1}/{args.rounds} done", file=sys.stderr)
    rows = []
    print(f"bench dispatch, ns/call: median of {args.rounds} alternating rounds a side")
    print(f"| row | this tree | {args.label_b} | this / {args.label_b} | per-round ratio range |")
    print("|---|---|---|---|---|")
    for key in runs_a[0]:
        if key not in runs_b[0]:
            continue
        a = [run[key] for run in runs_a]
        b = [run[key] for run in runs_b]
        ratios = [x / y for x, y in zip(a, b)]
        ma, mb = statistics.median(a), statistics.median(b)
        print(f"| {key} | {ma:.2f} | {mb:.2f} | {ma / mb:.3f} | "
              f"{min(ratios):.3f} to {max(ratios):.3f} |")
        rows.append({"row": key, "this": a, args.label_b: b, "ratio_of_medians": ma / mb,
                     "round_ratios": ratios})
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rounds": args.rounds, "label_b": args.label_b, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
