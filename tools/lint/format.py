#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The code's layout is the repository's .clang-format, checked and applied by one pinned
clang-format (14, Debian 12's), so the check means the same on every machine.

  tools/lint/format.py --check [ROOT]   list the tracked C++/CUDA files clang-format would
                                        change (exit 1 if any; 77, a skip, outside a git
                                        checkout or without clang-format 14, but a
                                        failure under CI=true)
  tools/lint/format.py --fix [ROOT]     format them in place, and move the docs' file:line
                                        anchors (tools/lint/doc_snippets.py anchors) that
                                        point into a changed file to the line their code
                                        moved to
  tools/lint/format.py --self-test      the anchor mapping on made-up files

CLANG_FORMAT names the program (default: clang-format-14, else clang-format if it is 14).
Files: every tracked .h .hpp .cpp .cc .cu .cuh but those under SKIP (none). A region the
formatter should leave alone says so with `// clang-format off` / `// clang-format on`.
"""
import concurrent.futures
import difflib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

EXTS = (".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh")
SKIP = ()
MAJOR = 14
# tools/lint/doc_snippets.py's anchor form: [path:LINE](rel/path#LLINE) (`symbol`)
ANCHOR = re.compile(r"\[(?P<text>[^\]]+)\]\((?P<href>[^)#\s]+)#L(?P<line>\d+)\)"
                    r"(?:\s*\(`(?P<sym>[^`]+)`\))?")


def find_clang_format():
    """(program, None) or (None, why not)."""
    cands = [os.environ["CLANG_FORMAT"]] if os.environ.get("CLANG_FORMAT") else [
        f"clang-format-{MAJOR}", "clang-format"]
    seen = []
    for c in cands:
        exe = shutil.which(c)
        if not exe:
            continue
        out = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout
        m = re.search(r"version (\d+)\.", out)
        if m and int(m.group(1)) == MAJOR:
            return exe, None
        seen.append(f"{c} is {m.group(1) if m else '?'}")
    found = "; ".join(seen) if seen else "none found"
    return None, (f"needs clang-format {MAJOR}, the version the tree is formatted with ({found}); "
                  f"apt install clang-format-{MAJOR}, or set CLANG_FORMAT")


def tracked_sources(root):
    listed = subprocess.run(["git", "-C", root, "ls-files"], capture_output=True, text=True)
    if listed.returncode != 0:
        return None
    return [f for f in listed.stdout.splitlines()
            if f.endswith(EXTS) and not f.startswith(SKIP) and (Path(root) / f).is_file()]


def formatted(exe, root, rel):
    return subprocess.run([exe, f"--style=file", f"--assume-filename={rel}"],
                          stdin=open(Path(root) / rel, "rb"), capture_output=True,
                          check=True, cwd=root).stdout.decode("utf-8")


def line_map(old, new):
    """For each 1-based line of old, the 1-based line of new it became: a line that
    survived maps to itself; a changed line to the start of what replaced it."""
    a, b = old.splitlines(), new.splitlines()
    m = {}
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        for k in range(i1, i2):
            if tag == "equal":
                m[k + 1] = j1 + (k - i1) + 1
            else:  # a replaced line: the same offset into the new block, clamped to it
                m[k + 1] = min(j1 + (k - i1), max(j1, j2 - 1)) + 1
    return m


def symbol_word(sym):
    return re.split(r"::|\.", sym.strip())[-1].rstrip("()")


def move_anchors(doc_text, doc_path, root, maps, new_texts):
    """doc_text with each anchor into a file of maps moved to its code's new line (the
    mapped line, or the nearest line holding the anchor's symbol). Returns (text, moved)."""
    moved = 0
    out_lines = []
    for line in doc_text.split("\n"):
        def repl(m):
            nonlocal moved
            target = (doc_path.parent / m["href"]).resolve()
            try:
                rel = str(target.relative_to(Path(root).resolve()))
            except ValueError:
                return m.group(0)
            if rel not in maps:
                return m.group(0)
            k = maps[rel].get(int(m["line"]), int(m["line"]))
            if m["sym"]:
                word = symbol_word(m["sym"])
                lines = new_texts[rel].splitlines()
                pat = re.compile(r"(?<!\w)" + re.escape(word) + r"(?!\w)")
                if not (1 <= k <= len(lines) and pat.search(lines[k - 1])):
                    hits = [i + 1 for i, l in enumerate(lines) if pat.search(l)]
                    if hits:
                        k = min(hits, key=lambda h: abs(h - k))
            if k == int(m["line"]):
                return m.group(0)
            moved += 1
            text = m["text"].replace(f":{m['line']}", f":{k}")
            s = f"[{text}]({m['href']}#L{k})"
            if m["sym"]:
                s += m.group(0)[m.group(0).index(")") + 1:]
            return s
        out_lines.append(ANCHOR.sub(repl, line))
    return "\n".join(out_lines), moved


def docs_of(root):
    listed = subprocess.run(["git", "-C", root, "ls-files", "*.md"], capture_output=True,
                            text=True).stdout.splitlines()
    return [Path(root) / f for f in listed if (Path(root) / f).is_file()]


def self_test():
    old = "a\nint foo(int x,\n        int y);\nb\nint bar();\n"
    new = "a\nint foo(int x, int y);\nb\nint bar();\n"
    m = line_map(old, new)
    assert m == {1: 1, 2: 2, 3: 2, 4: 3, 5: 4}, m
    doc = "see [src/x.h:5](../src/x.h#L5) (`bar`) and [src/x.h:2](../src/x.h#L2) (`foo`)."
    root = Path("/tmp/fmt-self-test")
    text, moved = move_anchors(doc, root / "docs" / "d.md", root, {"src/x.h": m},
                               {"src/x.h": new})
    assert text == "see [src/x.h:4](../src/x.h#L4) (`bar`) and [src/x.h:2](../src/x.h#L2) (`foo`).", text
    assert moved == 1
    # a symbol the mapped line lacks: the nearest line that holds it
    m2 = {1: 1, 2: 1}
    text, _ = move_anchors("[s/y.h:2](../s/y.h#L2) (`baz`)", root / "docs" / "d.md", root,
                           {"s/y.h": m2}, {"s/y.h": "x\ny\nint baz;\n"})
    assert text == "[s/y.h:3](../s/y.h#L3) (`baz`)", text
    print("format.py --self-test: OK")
    return 0


def main(argv):
    if "--self-test" in argv:
        return self_test()
    mode = "--fix" if "--fix" in argv else "--check"
    rest = [a for a in argv if not a.startswith("--")]
    root = rest[0] if rest else str(Path(__file__).resolve().parents[2])
    files = tracked_sources(root)
    if files is None:
        print(f"format.py: {root} is not a git checkout; skipped")
        return 77
    exe, why = find_clang_format()
    if exe is None:
        if os.environ.get("CI") == "true":  # CI installs it (tools/dev.sh deps): never skip there
            print(f"format.py: FAIL: {why}")
            return 1
        print(f"format.py: skipped: {why}")
        return 77
    def one(rel):
        return rel, (Path(root) / rel).read_text(encoding="utf-8"), formatted(exe, root, rel)
    with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 2) as pool:
        changed = {rel: (text, new) for rel, text, new in pool.map(one, files) if new != text}
    if mode == "--check":
        for rel, (text, new) in changed.items():
            n = sum(1 for l in difflib.unified_diff(text.splitlines(), new.splitlines(), n=0)
                    if l.startswith("-") and not l.startswith("---"))
            print(f"format.py: {rel}: {n} lines differ from .clang-format")
        print(f"format.py: {len(files)} files, {len(changed)} to format"
              + (f" (fix: python3 tools/lint/format.py --fix)" if changed else "") + ": "
              + ("FAIL" if changed else "OK"))
        return 1 if changed else 0
    maps = {rel: line_map(t, n) for rel, (t, n) in changed.items()}
    news = {rel: n for rel, (t, n) in changed.items()}
    for rel, (_, new) in changed.items():
        (Path(root) / rel).write_text(new, encoding="utf-8")
    total = 0
    for doc in docs_of(root):
        text = doc.read_text(encoding="utf-8")
        new_text, moved = move_anchors(text, doc, root, maps, news)
        if moved:
            doc.write_text(new_text, encoding="utf-8")
            total += moved
    print(f"format.py: formatted {len(changed)} of {len(files)} files; moved {total} doc anchors")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
