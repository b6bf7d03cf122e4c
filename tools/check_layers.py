#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Checks every #include "..." line against DESIGN's "may include" table.

The library's layers, lowest first: runtime < dispatcher < autograd < kernels. A file may
include headers of its own layer and of the layers below it, never of one above (the one
hook that runs the top of the library from below is a declaration, Note [Library
initialization] in runtime/init.h). tools/ and tests/ may include everything; examples/
only the public API (minitensor.h) and their own headers.

Usage: tools/check_layers.py [source root], or --self-test (this check on a made-up tree
with upward, sideways and downward includes). Prints each offending line as
file:line: text (the rule it breaks) and exits 1 if there is one, else prints a count and
exits 0.
"""
import os
import re
import sys

LIBRARY = ["runtime", "dispatcher", "autograd", "kernels"]
# folder -> the folders its files may include from (None: everything).
MAY_INCLUDE = {layer: set(LIBRARY[: i + 1]) for i, layer in enumerate(LIBRARY)}
MAY_INCLUDE.update({"tools": None, "tests": None, "": None, "examples": {"", "examples"}})
SOURCE_EXTS = (".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def layer_of(rel):
    """The layer of a path relative to the root: its first folder ('' for a top-level file)."""
    parts = rel.split("/")
    return parts[0] if len(parts) > 1 else ""


def sources(root):
    for top in sorted(os.listdir(root)):
        path = os.path.join(root, top)
        if os.path.isfile(path):
            if top.endswith(SOURCE_EXTS):
                yield top
            continue
        if top not in MAY_INCLUDE or top.startswith("."):
            continue  # build directories, subprojects, docs
        for dirpath, dirnames, filenames in os.walk(path):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith(("build", ".")))
            for f in sorted(filenames):
                if f.endswith(SOURCE_EXTS):
                    yield os.path.relpath(os.path.join(dirpath, f), root).replace(os.sep, "/")


def resolve(root, rel, target):
    """The included file relative to root: from the root (-I.), else next to the includer."""
    if os.path.isfile(os.path.join(root, target)):
        return os.path.normpath(target).replace(os.sep, "/")
    beside = os.path.normpath(os.path.join(os.path.dirname(rel), target))
    if os.path.isfile(os.path.join(root, beside)):
        return beside.replace(os.sep, "/")
    return None  # not in this tree (a system or toolkit header)


def check(root):
    bad = []
    checked = 0
    for rel in sources(root):
        allowed = MAY_INCLUDE[layer_of(rel)]
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            for n, line in enumerate(f, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                checked += 1
                target = resolve(root, rel, m.group(1))
                if target is None or allowed is None:
                    continue
                to = layer_of(target)
                if to not in allowed:
                    what = "the public API (minitensor.h)" if layer_of(rel) == "examples" else \
                        ", ".join(sorted(allowed))
                    bad.append(f"{rel}:{n}: {line.strip()}  ({layer_of(rel) or 'top level'}/ may "
                               f"include only {what}; {target} is in {to or 'the top level'}/)")
    return bad, checked


def self_test():
    import tempfile
    files = {
        "runtime/a.h": '#include "kernels/b.h"\n#include "runtime/c.h"\n',
        "runtime/c.h": "",
        "kernels/b.h": '#include "runtime/a.h"\n#include "d.cuh"\n',
        "kernels/d.cuh": "",
        "examples/e.cpp": '#include "minitensor.h"\n#include "runtime/a.h"\n',
        "minitensor.h": '#include "kernels/b.h"\n',
    }
    with tempfile.TemporaryDirectory() as root:
        for rel, text in files.items():
            os.makedirs(os.path.join(root, os.path.dirname(rel)), exist_ok=True)
            with open(os.path.join(root, rel), "w") as f:
                f.write(text)
        bad, checked = check(root)
    found = sorted(b.split(": ")[0] for b in bad)
    want = ["examples/e.cpp:2", "runtime/a.h:1"]
    if checked != 7 or found != want:
        print(f"check_layers --self-test: flagged {found} of {checked} lines, expected {want} of 7")
        return 1
    print("check_layers --self-test: the upward includes are flagged, the others pass")
    return 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    root = os.path.abspath(root)
    bad, checked = check(root)
    for b in bad:
        print(b)
    if bad:
        print(f"check_layers: {len(bad)} include(s) of a layer above the includer (the layers, "
              "lowest first: runtime < dispatcher < autograd < kernels); move the code down, or "
              "reach the op through the dispatcher (mt::call, a typed handle)")
        return 1
    print(f"check_layers: {checked} #include lines, none reaches a layer above its file")
    return 0


if __name__ == "__main__":
    sys.exit(main())
