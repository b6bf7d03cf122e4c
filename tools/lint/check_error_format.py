#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Checks that every mt::Error message the library can throw starts with a name in brackets.

docs/embedding.md promises that every mt::Error's message starts with the op's name in
brackets ("[add_] result type ..."; "[schema] ...", "[jit] ..." for errors of a part
rather than an op). This reads every MT_CHECK(cond, "format", ...) and MT_ERROR("format",
...) in the library and tools/, and every `throw Error(...)`, and checks that the format
string starts with "[NAME] " (NAME may be a "{}" filled with the op's name). A message
built elsewhere must be passed as MT_ERROR("{}", msg) only when msg is built with the
prefix: those are listed in ALLOWED_INDIRECT with the reason. The robustness probe
(tests/robustness/probe.cpp) checks the messages themselves, at run time.

Usage: tools/lint/check_error_format.py [source root], or --self-test. Prints each offending
call as file:line: text and exits 1 if there is one, else prints a count and exits 0.
"""
import os
import re
import sys

FOLDERS = ["runtime", "dispatcher", "autograd", "kernels", "tools"]
CALL = re.compile(r"\b(MT_CHECK|MT_ERROR|throw\s+(?:mt::)?Error)\s*\(")
PREFIX = re.compile(r'^\[[^\]\s][^\]\n]*\] ')
# Messages passed through a variable or helper, each built with its prefix where named.
ALLOWED_INDIRECT = {
    ("dispatcher/schema.cpp", 'MT_ERROR("{}", msg)'): 'msg = "[schema] ..." just above',
    ("runtime/error.cpp", "throw Error(std::move(msg))"): "throw_error, behind MT_CHECK and MT_ERROR",
    ("kernels/jit/nvrtc.cpp", "throw Error(format_compile_error("): 'format_compile_error starts with "[jit] "',
}


def skip_string(s, i):
    """Index just past the string or char literal starting at s[i]."""
    q = s[i]
    i += 1
    while s[i] != q:
        i += 2 if s[i] == "\\" else 1
    return i + 1


def first_argument_end(s, i):
    """Index of the top-level comma ending the argument that starts at s[i]."""
    depth = 0
    while True:
        c = s[i]
        if c in "\"'":
            i = skip_string(s, i)
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            if depth == 0:
                return i
            depth -= 1
        elif c == "," and depth == 0:
            return i
        i += 1


def check_text(rel, text):
    """(line, problem) for each call in `text` whose message lacks the prefix."""
    out, checked = [], 0
    for m in CALL.finditer(text):
        line_start = text.rfind("\n", 0, m.start()) + 1
        before = text[line_start:m.start()]
        if before.lstrip().startswith("#") or "//" in before:
            continue  # the macros' own definitions, comments
        i = m.end()
        checked += 1
        if m.group(1) == "MT_CHECK":
            i = first_argument_end(text, i) + 1
        rest = text[i:].lstrip()
        line = text.count("\n", 0, m.start()) + 1
        call = text[m.start():m.end()] + rest[:40]
        if any(rel == f and call.startswith(c) for f, c in ALLOWED_INDIRECT):
            continue
        lit = re.match(r'"((?:[^"\\]|\\.)*)"', rest)
        if not lit:
            out.append((line, "the message is not a string literal: " + call.split("\n")[0]))
        elif not PREFIX.match(lit.group(1)):
            out.append((line, 'the message does not start with "[name] ": "%s"' % lit.group(1)[:60]))
    return out, checked


def check_tree(root):
    problems, count = [], 0
    for folder in FOLDERS:
        for dirpath, _, files in os.walk(os.path.join(root, folder)):
            for name in sorted(files):
                if not name.endswith((".h", ".cpp", ".cuh")):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                with open(path, encoding="utf-8", errors="replace") as f:
                    text = f.read()
                found, checked = check_text(rel, text)
                count += checked
                problems += [(rel, line, p) for line, p in found]
    return problems, count


def self_test():
    good = ('MT_CHECK(a(1, 2) > 0, "[op] bad; fix", x);\nMT_ERROR("[{}] no", name);\n'
            '#define MT_ERROR(...) x\n// throw Error (in a comment)\n')
    bad = 'MT_CHECK(ok, "no prefix {}", x);\nMT_ERROR(msg);\nthrow Error("[op]no space");\n'
    assert check_text("x.cpp", good) == ([], 2), check_text("x.cpp", good)
    got, _ = check_text("x.cpp", bad)
    assert [line for line, _ in got] == [1, 2, 3], got
    print("check_error_format self-test: ok")


def main():
    if sys.argv[1:] == ["--self-test"]:
        self_test()
        return 0
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    problems, count = check_tree(root)
    for rel, line, p in problems:
        print("%s:%d: %s" % (rel, line, p))
    if problems:
        print("%d of %d error messages do not start with the op's name in brackets "
              "(docs/embedding.md, 'Errors')" % (len(problems), count))
        return 1
    print("%d error messages checked: each starts with a name in brackets" % count)
    return 0


if __name__ == "__main__":
    sys.exit(main())
