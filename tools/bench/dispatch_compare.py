#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The host cost of one call, minitensor against libtorch C++: `compare_torch.py --dispatch`.

Two forms, chosen by what --libtorch-bench is (tools/bench/bench_libtorch.cpp):
- plain: `minitensor bench dispatch --json` and bench_libtorch run one after the other,
  --rounds times, each in its own process; a round's ratio is libtorch's ns over
  minitensor's, each the median of 5 timed loops;
- --interleaved: bench_libtorch built with minitensor's rows linked in (-DMT_INTERLEAVED)
  times both in one process, each row of a round as pairs of loops a few milliseconds apart;
  a round's ratio is the median of its pairs' ratios (libtorch / minitensor), its ns the
  median loop of each side.
Prints the median over the rounds per row, the range of the ratio over the rounds, and
every round. Needs no torch itself (compare_torch.py passes torch's version for the header):

  dispatch_compare.py --libtorch-bench PATH [--interleaved] [--minitensor PATH]
                      [--rounds N] [--json OUT]
"""
import argparse
import json
import statistics
import subprocess
import sys

# minitensor's row labels (bench dispatch's table), the key both sides' JSON uses (bench
# dispatch --json, bench_libtorch), and what the libtorch side of each row is.
DISPATCH_ROWS = [
    ("direct C++ call of the no-op kernel", "direct", "direct call"),
    ("unboxed dispatch, CPU kernel only", "dispatch", "op.call, autograd fallback in the path"),
    (None, "below_autograd", "op.call under AutoDispatchBelowADInplaceOrView"),
    ("unboxed dispatch, Autograd kernel redispatching to CPU", "autograd_redispatch",
     "Autograd kernel, redispatch after_autograd_keyset"),
    ("boxed call (Stack)", "boxed", "callBoxed"),
    ("mt::silu on 1 element, requires grad (records the tape)", "silu_grad",
     "at::silu, requires grad"),
    ("mt::add on 1 element", "add", "at::add"),
]


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            return next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        return "?"


def main_dispatch(args, torch_version="?"):
    mt_runs, lt_runs, ratio_runs = [], [], []
    pairs = loop_ms = None
    if args.interleaved:
        out = subprocess.run([args.libtorch_bench, "--interleaved", str(args.rounds)], check=True,
                             capture_output=True, text=True).stdout
        doc = json.loads(out)
        pairs, loop_ms = doc["pairs"], doc["loop_ms"]
        for rnd in doc["rounds"]:
            mt_runs.append({k: v["minitensor"] for k, v in rnd.items()})
            lt_runs.append({k: v["libtorch"] for k, v in rnd.items()})
            ratio_runs.append({k: v["ratio"] for k, v in rnd.items()})
    for r in range(0 if args.interleaved else args.rounds):
        out = subprocess.run([args.minitensor, "bench", "dispatch", "--json"], check=True,
                             capture_output=True, text=True).stdout
        mt_runs.append(json.loads(out))
        out = subprocess.run([args.libtorch_bench], check=True, capture_output=True,
                             text=True).stdout
        lt_runs.append(json.loads(out))
        print(f"[dispatch] round {r + 1}/{args.rounds} done", file=sys.stderr)
    cpu = cpu_model()
    how = (f"in one process; each row in a round {pairs} pairs of ~{loop_ms} ms loops, "
           "minitensor's and libtorch's back to back: its ns the median loop of each side, its "
           "ratio the median of the pairs' ratios" if args.interleaved
           else "each side in its own process, alternating; each row in a round the median of "
           "5 timed loops")
    print(f"Host cost of one call, ns (median of {args.rounds} rounds, {how}), on {cpu}, "
          f"torch {torch_version}")
    print("| call | minitensor ns | libtorch ns | libtorch/mt | ratio range over rounds |"
          " libtorch side |")
    print("|---|---|---|---|---|---|")
    rows = []
    for mt_name, key, what in DISPATCH_ROWS:
        if key not in lt_runs[0]:
            continue  # the interleaved form times only the rows both sides have
        lt = [run[key] for run in lt_runs]
        mt = [run[key] for run in mt_runs] if mt_name else None
        ratios = None
        if mt:
            ratios = ([run[key] for run in ratio_runs] if ratio_runs
                      else [l / m for l, m in zip(lt, mt)])
            ratio = f"{statistics.median(ratios):.2f}x"
            rng = f"{min(ratios):.2f}x to {max(ratios):.2f}x"
        else:
            ratio = rng = "-"
        name = mt_name or "(no minitensor row) below autograd"
        mts = f"{statistics.median(mt):.1f}" if mt else "-"
        print(f"| {name} | {mts} | {statistics.median(lt):.1f} | {ratio} | {rng} | {what} |")
        rows.append({"row": key, "minitensor": mt, "libtorch": lt, "ratio": ratios})
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"cpu": cpu, "torch": torch_version,
                       "form": "pairs" if args.interleaved else "processes",
                       "pairs": pairs, "loop_ms": loop_ms, "rows": rows}, f, indent=1)
    # Every round, so that "in every round" can be read off the log.
    print("\nPer round, minitensor ns, libtorch ns: libtorch / minitensor" +
          (" (the median of the pairs' ratios)" if ratio_runs else ""))
    for row in rows:
        if row["ratio"] is None:
            continue
        cells = [f"{m:.1f}, {l:.1f}: {r:.2f}x"
                 for m, l, r in zip(row["minitensor"], row["libtorch"], row["ratio"])]
        print(f"  {row['row']}: " + "; ".join(cells))
    return 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--libtorch-bench", required=True)
    ap.add_argument("--minitensor", default="build/tools/minitensor")
    ap.add_argument("--interleaved", action="store_true")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", default="")
    sys.exit(main_dispatch(ap.parse_args()))
