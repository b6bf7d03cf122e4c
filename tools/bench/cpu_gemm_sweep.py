#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The CPU MLP step under each of several matmul settings, side by side in one run.

Each setting is an environment (MT_GEMM_BLOCKS=KC,MC,NC for the library's own kernel, or
MT_MATMUL=blas with OPENBLAS_CORETYPE=...): `minitensor bench mlp --device cpu --json` runs
once per setting per round, the settings in turn and their order rotated every round, so a
drift of a shared host weighs on all alike. Prints, per setting, the median over the rounds
of the step's median ms and its ratio to the first setting (the defaults):

  cpu_gemm_sweep.py MINITENSOR [--shape 512x256x512] [--rounds 5] [--steps 60]
                    [--blocks KC,MC,NC ...] [--blas CORE ...] [--max-seconds S] [--json OUT]

Rounds stop early once --max-seconds have passed (a whole round at least runs); the table
says how many ran.

Pin it (taskset -c 0,1) for a fixed number of cores.
"""
import argparse
import json
import os
import statistics
import subprocess
import time

DEFAULT_BLOCKS = ["256,0,1024", "128,0,1024", "512,0,1024", "256,288,1024", "384,192,2048"]


def step_ms(exe, shape, steps, env):
    out = subprocess.run([exe, "bench", "mlp", "--device", "cpu", "--shape", shape, "--steps",
                          str(steps), "--json"], check=True, capture_output=True, text=True,
                         env={**os.environ, **env}).stdout
    return json.loads(out)["rows"][0]["ms_median"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("minitensor")
    ap.add_argument("--shape", default="512x256x512")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--blocks", nargs="*", default=DEFAULT_BLOCKS,
                    help="MT_GEMM_BLOCKS values for the own kernel; the first is the baseline")
    ap.add_argument("--blas", nargs="*", default=["SkylakeX"],
                    help="OPENBLAS_CORETYPE values to run OpenBLAS with (MT_MATMUL=blas)")
    ap.add_argument("--max-seconds", type=float, default=150)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    settings = [(f"own {b}", {"MT_MATMUL": "own", "MT_GEMM_BLOCKS": b}) for b in args.blocks]
    settings += [(f"blas {c}", {"MT_MATMUL": "blas", "OPENBLAS_CORETYPE": c}) for c in args.blas]
    runs = {name: [] for name, _ in settings}
    t0, rounds = time.monotonic(), 0
    for r in range(args.rounds):
        if r > 0 and time.monotonic() - t0 > args.max_seconds:
            break
        k = r % len(settings)
        for name, env in settings[k:] + settings[:k]:
            runs[name].append(step_ms(args.minitensor, args.shape, args.steps, env))
        rounds += 1
        print(f"round {rounds}: {time.monotonic() - t0:.0f} s", flush=True)
    base = statistics.median(runs[settings[0][0]])
    rows = []
    print(f"MLP step {args.shape} on the CPU, median over {rounds} rounds of each run's "
          f"median ms ({args.steps} steps)")
    print("| setting | ms/step | baseline / this | per-round range ms |")
    print("|---|---|---|---|")
    for name, _ in settings:
        m = statistics.median(runs[name])
        rows.append({"setting": name, "ms_median": m, "speedup": base / m, "runs": runs[name]})
        print(f"| {name} | {m:.3f} | {base / m:.2f}x | {min(runs[name]):.3f} to "
              f"{max(runs[name]):.3f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"shape": args.shape, "rounds": rounds, "steps": args.steps,
                       "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
