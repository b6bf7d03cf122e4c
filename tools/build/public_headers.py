#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""minitensor's public headers, and their installation under a namespaced path.

The public headers are minitensor.h and every header it includes, transitively (found by
following the #include "..." lines from the source root, as the build's -I. does). They
are installed as <includedir>/minitensor/<path> (minitensor/minitensor.h,
minitensor/runtime/tensor.h, ...), with each #include "X" of a public header rewritten
to #include <minitensor/X>, so an app needs only -I<includedir> and its include path
gets no generic folder names (runtime/, kernels/).

  public_headers.py --list SRCROOT            print the public headers, one a line
  public_headers.py --install SRCROOT INCDIR  install them (a Meson install script:
                                              DESTDIR-aware through MESON_INSTALL_DESTDIR_PREFIX)
  public_headers.py --write SRCROOT OUTDIR [STAMP]
                                              write the installed tree into OUTDIR (and
                                              touch STAMP: the build's custom target)
  public_headers.py --check SRCROOT [LIST] [CXX...]
                                              fail when the headers minitensor.h reaches
                                              differ from LIST (tools/build/public_headers.txt);
                                              print their count, lines and, with CXX, the
                                              lines of `CXX -E` over #include "minitensor.h"
  public_headers.py --compare [--runs N] ROOT... [-- CXX...]
                                              for each source root: the public headers'
                                              count and lines, the `CXX -E` lines of
                                              minitensor.h, and the median CPU seconds (user
                                              + system) of `CXX -fsyntax-only` over it, the
                                              roots' runs interleaved (N each, default 5);
                                              JSON on stdout (CXX: g++ -std=c++20)
"""
import os
import re
import sys

INCLUDE = re.compile(r'^(\s*#\s*include\s+)"([^"]+)"(.*)$')
UMBRELLA = "minitensor.h"
# The namespaces a public header may open (issue 35): the API, the jit and CUDA parts, and
# the internals that templates and inline functions need.
NAMESPACES = ("mt", "mt::jit", "mt::cuda", "mt::detail")


def resolve(root, includer, target):
    """The included file relative to root: from the root (-I.), else next to the includer."""
    for rel in (target, os.path.join(os.path.dirname(includer), target)):
        rel = os.path.normpath(rel)
        if os.path.isfile(os.path.join(root, rel)):
            return rel.replace(os.sep, "/")
    return None


def public_headers(root):
    seen, todo = set(), [UMBRELLA]
    while todo:
        rel = todo.pop()
        if rel in seen:
            continue
        seen.add(rel)
        with open(os.path.join(root, rel), encoding="utf-8") as f:
            for line in f:
                m = INCLUDE.match(line)
                if m:
                    target = resolve(root, rel, m.group(2))
                    if target is None:
                        sys.exit(f"public_headers.py: {rel} includes \"{m.group(2)}\", which is "
                                 "not in the source tree")
                    todo.append(target)
    return sorted(seen)


def rewritten(root, rel, public):
    out = []
    with open(os.path.join(root, rel), encoding="utf-8") as f:
        for line in f:
            m = INCLUDE.match(line.rstrip("\n"))
            if m:
                target = resolve(root, rel, m.group(2))
                assert target in public, (rel, target)
                line = f"{m.group(1)}<minitensor/{target}>{m.group(3)}\n"
            out.append(line)
    return "".join(out)


def write_tree(root, outdir):
    public = public_headers(root)
    for rel in public:
        dest = os.path.join(outdir, "minitensor", rel)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        text = rewritten(root, rel, set(public))
        old = open(dest, encoding="utf-8").read() if os.path.exists(dest) else None
        if old != text:  # unchanged files keep their time stamps
            with open(dest, "w", encoding="utf-8") as f:
                f.write(text)
            os.chmod(dest, 0o644)
    return public


def read_list(path):
    with open(path, encoding="utf-8") as f:
        return [l.strip() for l in f if l.strip() and not l.startswith("#")]


def preprocessed_lines(root, cxx):
    """The lines of `CXX -E` over a file holding #include "minitensor.h"."""
    import subprocess
    import tempfile
    with tempfile.NamedTemporaryFile("w", suffix=".cpp", delete=False) as t:
        t.write('#include "minitensor.h"\n')
    try:
        out = subprocess.run(cxx + ["-I", root, "-E", t.name], capture_output=True, text=True,
                             check=True).stdout
    finally:
        os.unlink(t.name)
    return out.count("\n")


def namespaces(text):
    """The namespaces a header opens, fully qualified ("mt::jit"), in order of first opening.
    Comments, strings and character literals are skipped; braces are tracked so that a nested
    `namespace detail {` inside mt::jit counts as mt::jit::detail."""
    text = re.sub(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', " ", text,
                  flags=re.S)
    token = re.compile(r'\bnamespace\s+([A-Za-z_][\w:]*)\s*\{|\bnamespace\s*\{|[{}]')
    stack, found = [], []  # stack: the namespace a brace opened, or None for another brace
    for m in token.finditer(text):
        t = m.group(0)
        if t == "}":
            if stack:
                stack.pop()
        elif t == "{":
            stack.append(None)
        elif m.group(1) is None:  # an anonymous namespace
            stack.append("(anonymous)")
        else:
            outer = [n for n in stack if n is not None]
            name = "::".join(outer[-1:] + [m.group(1)]) if outer else m.group(1)
            stack.append(name)
            if name not in found:
                found.append(name)
    return found


def check(root, list_path, cxx):
    """0 when minitensor.h reaches exactly the listed headers; prints the sizes."""
    reached, chosen = public_headers(root), read_list(list_path)
    extra = sorted(set(reached) - set(chosen))
    gone = sorted(set(chosen) - set(reached))
    for h in extra:
        print(f"public_headers: minitensor.h reaches {h}, which is not on {list_path}: include it "
              "from a .cpp file instead, or add it to the list if users need it")
    for h in gone:
        print(f"public_headers: {h} is on {list_path} but minitensor.h no longer reaches it: "
              "take it off the list")
    bad_ns = 0
    for h in reached:
        with open(os.path.join(root, h), encoding="utf-8") as f:
            for ns in namespaces(f.read()):
                if ns not in NAMESPACES:
                    bad_ns += 1
                    print(f"public_headers: {h} opens namespace {ns}; a public header keeps to "
                          f"{', '.join(NAMESPACES)}: move it to one of them or out of the "
                          "public headers")
    lines = 0
    for h in reached:
        with open(os.path.join(root, h), encoding="utf-8") as f:
            lines += sum(1 for _ in f)
    print(f"public_headers: {len(reached)} headers, {lines} lines", end="")
    if cxx:
        print(f", {preprocessed_lines(root, cxx + ['-std=c++20'])} preprocessed lines "
              f"({' '.join(cxx)} -E)", end="")
    print()
    return 1 if extra or gone or bad_ns else 0





def syntax_cpu_seconds(root, cxx):
    """CPU seconds (user + system) of one `CXX -fsyntax-only` over minitensor.h."""
    import resource
    import subprocess
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cxx + ["-I", root, "-fsyntax-only", "-Wno-pragma-once-outside-header", "-x",
                          "c++", os.path.join(root, UMBRELLA)], check=True,
                   stderr=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def compare(args):
    import json
    import statistics
    runs, roots, cxx = 5, [], ["g++", "-std=c++20"]
    if "--" in args:
        cxx = args[args.index("--") + 1:]
        args = args[:args.index("--")]
    if args[:1] == ["--runs"]:
        runs, args = int(args[1]), args[2:]
    roots = args
    if not roots or runs < 1:
        sys.exit(__doc__)
    times = {r: [] for r in roots}
    for _ in range(runs):  # interleaved, so load on a shared machine falls on every root alike
        for r in roots:
            times[r].append(syntax_cpu_seconds(r, cxx))
    result = []
    for r in roots:
        headers = public_headers(r)
        lines = sum(sum(1 for _ in open(os.path.join(r, h), encoding="utf-8")) for h in headers)
        result.append({"root": r, "headers": len(headers), "lines": lines,
                       "preprocessed_lines": preprocessed_lines(r, cxx),
                       "syntax_cpu_s_median": round(statistics.median(times[r]), 3),
                       "syntax_cpu_s": [round(t, 3) for t in times[r]]})
    print(json.dumps({"compiler": " ".join(cxx), "runs": runs, "roots": result}, indent=1))


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "--compare":
        compare(sys.argv[2:])
        return
    if len(sys.argv) >= 3 and sys.argv[1] == "--check":
        root = sys.argv[2]
        listed = sys.argv[3] if len(sys.argv) > 3 else os.path.join(root, "tools", "build", "public_headers.txt")
        sys.exit(check(root, listed, sys.argv[4:]))
    if len(sys.argv) == 3 and sys.argv[1] == "--list":
        print("\n".join(public_headers(sys.argv[2])))
    elif len(sys.argv) in (4, 5) and sys.argv[1] == "--write":
        write_tree(sys.argv[2], sys.argv[3])
        if len(sys.argv) == 5:
            with open(sys.argv[4], "w", encoding="utf-8") as f:
                f.write("\n".join(public_headers(sys.argv[2])) + "\n")
    elif len(sys.argv) == 4 and sys.argv[1] == "--install":
        root, incdir = sys.argv[2], sys.argv[3]
        prefix = os.environ.get("MESON_INSTALL_DESTDIR_PREFIX", "")
        destdir = os.environ.get("DESTDIR", "")
        if os.path.isabs(incdir):  # an absolute includedir is under DESTDIR, not the prefix
            target = destdir + incdir if destdir else incdir
        else:
            target = os.path.join(prefix, incdir)
        public = write_tree(root, target)
        if not os.environ.get("MESON_INSTALL_QUIET"):
            print(f"Installing {len(public)} public headers to {os.path.join(target, 'minitensor')}")
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
