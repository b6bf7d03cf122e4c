#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""How long a first build takes on N idle cores, from the CPU time of each step of a cold
build (which a loaded machine hardly changes, unlike its wall time).

  build_time.py measure BUILDDIR [MESON OPTION...]
      configure BUILDDIR from this checkout with the compiler wrapped (no ccache), build
      everything, and log each compile and link step's CPU seconds in BUILDDIR/../NAME.times
  build_time.py report BUILDDIR CORES [TARGET...]
      the steps the targets need (default: all), their CPU seconds, and the wall time of
      running them on CORES idle cores in dependency order (a longest-first list schedule,
      as ninja does it more or less); configure steps and Python generators count as 0
  build_time.py cc LOG COMPILER ARG...   (the wrapper itself)

tools/dev.sh's help quotes `report` for `demo` (tools/minitensor examples/silu_custom_op
examples/mlp_train) and for everything (all), from a `measure` with dev.sh's options
(-Dcpp_args=-g1).
"""
import heapq
import os
import re
import resource
import subprocess
import sys


def times_log(builddir):
    builddir = os.path.abspath(builddir)
    return os.path.join(os.path.dirname(builddir), os.path.basename(builddir) + ".times")


def cc(log, argv):
    out = next((b for a, b in zip(argv, argv[1:]) if a == "-o"), None)
    rc = subprocess.call(argv)
    if out:
        r = resource.getrusage(resource.RUSAGE_CHILDREN)
        with open(log, "a") as f:  # one short write a step: appends do not interleave
            f.write(f"{r.ru_utime + r.ru_stime:.3f} {out}\n")
    return rc


def measure(builddir, options):
    log = times_log(builddir)
    if os.path.exists(os.path.join(builddir, "build.ninja")):
        sys.exit(f"build_time.py: {builddir} is configured already; measure a new directory")
    open(log, "w").close()
    env = dict(os.environ, CCACHE_DISABLE="1",
               CXX=f"{sys.executable} {os.path.abspath(__file__)} cc {log} "
                   f"{os.environ.get('CXX', 'c++')}")
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    subprocess.run(["meson", "setup", builddir, root] + options, env=env, check=True,
                   stdout=subprocess.DEVNULL)
    subprocess.run(["ninja", "-C", builddir], env=env, check=True)
    print(f"build_time.py: each step's CPU seconds in {log}")


def report(builddir, cores, targets):
    cpu = {}
    for line in open(times_log(builddir)):
        secs, out = line.rstrip("\n").split(" ", 1)
        cpu[out] = float(secs)
    # build.ninja's edges: "build OUT...: RULE IN... | IMPLICIT... || ORDER..."
    text = open(os.path.join(builddir, "build.ninja")).read().replace("$\n", " ")
    split = lambda s: [p.replace("$ ", " ").replace("$:", ":")
                       for p in re.split(r"(?<!\$) ", s.strip()) if p not in ("", "|", "||")]
    first_of, inputs = {}, {}
    for line in text.splitlines():
        m = re.match(r"build (.*?)(?<!\$): \S+(.*)", line)
        if m:
            outs = split(m.group(1))
            for o in outs:
                first_of[o] = outs[0]
            inputs[outs[0]] = split(m.group(2))
    need, todo = set(), list(targets or ["all"])
    while todo:
        t = first_of.get(todo.pop())
        if t is not None and t not in need:
            need.add(t)
            todo.extend(inputs[t])
    deps = {s: {first_of[i] for i in inputs[s] if i in first_of} & need for s in need}
    users = {s: [u for u in need if s in deps[u]] for s in need}
    waiting = {s: len(d) for s, d in deps.items()}
    ready = [s for s in need if not deps[s]]
    running, now, free = [], 0.0, cores
    while ready or running:
        ready.sort(key=lambda s: -cpu.get(s, 0))
        while ready and free:
            s = ready.pop(0)
            free -= 1
            heapq.heappush(running, (now + cpu.get(s, 0), s))
        now, s = heapq.heappop(running)
        free += 1
        for u in users[s]:
            waiting[u] -= 1
            if waiting[u] == 0:
                ready.append(u)
    steps = [s for s in need if s in cpu]
    print(f"{' '.join(targets) or 'all'}: {len(steps)} compile and link steps, "
          f"{sum(cpu[s] for s in steps):.0f} CPU s, {now / 60:.1f} min on {cores} idle cores")


def main(argv):
    if len(argv) >= 4 and argv[1] == "cc":
        return cc(argv[2], argv[3:])
    if len(argv) >= 3 and argv[1] == "measure":
        return measure(argv[2], argv[3:])
    if len(argv) >= 4 and argv[1] == "report":
        return report(argv[2], int(argv[3]), argv[4:])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
