#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""tools/scripts/gpu_check.sh's presets, as a dry run (DRY_RUN=1: each step's command is
printed, none runs; no GPU needed): each preset builds its targets and runs its steps, an
unknown preset is a usage error that lists the presets.

usage: check_gpu_presets.py GPU_CHECK.SH OUTDIR
"""
import os
import re
import subprocess
import sys

# What a build of tests/mt_tests adds: the libraries its cases load.
LOADED = " " + " ".join(f"tests/libload_probe_{v}.so" for v in [
    "ctor_throws", "block_throws_int", "dep", "nested", "cycle", "defines_add", "mt_library",
    "bad_block", "user_ops"]) + " tests/fake_nvrtc/libfake_nvrtc.so"
# preset -> (ninja targets, steps that must run, steps that must not)
EXPECT = {
    "all": ("", ["tests", "tutorial", "silu-ncu", "dispatch", "scenarios", "attention", "compile-tests",
                 "memcheck", "racecheck", "synccheck"], ["keys-example", "cpu-bench", "silu-bf16"]),
    "verify": ("tests/mt_tests tools/minitensor tools/bench_silu" + LOADED,
               ["tests", "memcheck-silu", "racecheck-silu", "memcheck-16bit", "silu-bf16", "silu-bf16-torch",
                "hostcost"], ["memcheck", "scenarios"]),
    "short": ("tests/mt_tests tools/minitensor tools/bench_silu" + LOADED,
              ["silu-tests", "silu-bf16", "hostcost", "dispatch"], ["tests", "dispatch-pinned"]),
    "hostcost": ("tools/minitensor tools/bench_silu",
                 ["hostcost", "dispatch", "dispatch-pinned", "dispatch-procs", "dispatch-selfcheck"], ["tests"]),
    "keys": ("tools/minitensor examples/per_sample_grads",
             ["keys-example", "keys-bench-cuda", "keys-bench-cpu", "keys-split-cuda"], ["tests"]),
    "cpu": ("tools/minitensor tools/bench_compile_cpu", ["cpu-bench", "cpu-mlp+torch", "cpu-fusion"], ["tests"]),
}


def run(script, out, *args):
    env = dict(os.environ, DRY_RUN="1", OUT=out)
    env.pop("STEPS", None)
    return subprocess.run(["bash", script, *args], capture_output=True, text=True, env=env, timeout=60)


def main():
    script, outdir = sys.argv[1], sys.argv[2]
    failures = []
    for preset, (targets, must, must_not) in EXPECT.items():
        out = os.path.join(outdir, preset)
        os.makedirs(out, exist_ok=True)
        p = run(script, out, preset)
        ran = re.findall(r"^== (\S+) \(timeout \d+s\): (.*)$", p.stdout, re.M)
        names = [n for n, _ in ran]
        if p.returncode != 0:
            failures.append(f"{preset}: exit {p.returncode}: {p.stderr[-500:]}")
            continue
        build = [cmd for n, cmd in ran if n == "build"]
        if not build or not build[0].endswith(("-k 0 " + targets).rstrip()):
            failures.append(f"{preset}: the build step is {build!r}, want targets {targets!r}")
        failures += [f"{preset}: step {s} did not run (ran: {names})" for s in must if s not in names]
        failures += [f"{preset}: step {s} ran" for s in must_not if s in names]
    p = run(script, os.path.join(outdir, "bad"), "nosuch")
    if p.returncode != 2 or "unknown preset 'nosuch'" not in p.stderr or "verify" not in p.stderr:
        failures.append(f"unknown preset: exit {p.returncode}, stderr {p.stderr!r}")
    for f in failures:
        print("FAIL", f)
    print(f"{len(EXPECT) + 1} presets checked, {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
