#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Compile-fail check: runs a compiler command and judges its result.

  check.py --expect-error TEXT -- compiler args...   passes if compilation fails and the
                                                     output contains TEXT
  check.py --expect-ok -- compiler args...           passes if compilation succeeds
"""
import subprocess
import sys


def main():
    args = sys.argv[1:]
    if "--" not in args:
        sys.exit("usage: check.py (--expect-error TEXT | --expect-ok) -- compiler args...")
    sep = args.index("--")
    opts, cmd = args[:sep], args[sep + 1:]
    expect = opts[1] if opts[:1] == ["--expect-error"] and len(opts) == 2 else None
    if expect is None and opts != ["--expect-ok"]:
        sys.exit("check.py: give --expect-error TEXT or --expect-ok")
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = p.stdout
    print("$ " + " ".join(cmd))
    if expect is None:
        if p.returncode == 0:
            print("compiled, as expected")
            return 0
        print(out)
        print(f"FAIL: the control case must compile, but the compiler exited with {p.returncode}")
        return 1
    if p.returncode == 0:
        print(out)
        print(f"FAIL: compiled, but must fail with: {expect}")
        return 1
    if expect not in out:
        print(out)
        print(f"FAIL: compilation failed, but not with the expected message: {expect}")
        return 1
    first = next((line for line in out.splitlines() if expect in line), "")
    print("failed to compile, as expected:\n  " + first.strip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
