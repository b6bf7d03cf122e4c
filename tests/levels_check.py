#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Checks Note [Test levels] (tests/meson.build): the doctest shards' filters together list
every case of mt_tests exactly once (skipped ones included), and every test file of the
program is in exactly one level.

usage: levels_check.py MT_TESTS [@level:NAME ARG...]... [@files:NAME FILE...]... @sources FILE...
  @level:NAME  the doctest filter arguments of that level's shard follow
  @files:NAME  the test files of that level follow
  @sources     every test file of the program follows
"""
import collections
import subprocess
import sys


def cases(exe, args):
    out = subprocess.run([exe, "--no-intro", "--list-test-cases", "--no-skip", *args],
                         capture_output=True, text=True, check=True).stdout
    lines = out.splitlines()
    # between the two ===== rules
    rules = [i for i, l in enumerate(lines) if l.startswith("=====")]
    return lines[rules[0] + 1:rules[1]] if len(rules) >= 2 else []


def main():
    exe = sys.argv[1]
    levels, files = {}, {"sources": [], "levels": {}}
    into = None
    for a in sys.argv[2:]:
        if a.startswith("@level:"):
            into = levels.setdefault(a[7:], [])
        elif a.startswith("@files:"):
            into = files["levels"].setdefault(a[7:], [])
        elif a == "@sources":
            into = files["sources"]
        else:
            into.append(a)
    problems = []
    placed = collections.Counter(f for names in files["levels"].values() for f in names)
    for src in files["sources"]:
        if placed[src] != 1:
            problems.append(f"{src} is in {placed[src]} levels (want 1): add it to one list of mt_level_files")
    for f in placed:
        if f not in files["sources"]:
            problems.append(f"{f} is in a level but not in test_sources")
    every = collections.Counter(cases(exe, []))
    shards = collections.Counter()
    for level, args in levels.items():
        got = cases(exe, args)
        print(f"{level}: {len(got)} cases")
        shards.update(got)
    for name in every:
        if shards[name] != every[name]:
            problems.append(f"case {name!r} runs in {shards[name]} shards (want {every[name]})")
    for p in problems:
        print("FAIL", p)
    print(f"{sum(every.values())} cases, {len(levels)} levels, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
