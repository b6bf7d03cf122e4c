#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Turns the ```cpp blocks of a markdown file into one C++ program, so the docs' code is
compiled and run by the tests (tests/docs/meson.build) and cannot rot.

  doc_snippets.py extract DOC.md OUT.cpp OUT.expected.json [--root DIR]
  doc_snippets.py check EXE EXPECTED.json     run EXE, compare its output per block

The blocks of one file form one program, in order, like a notebook: a later block may
use what an earlier one declared. Each block is split into top-level items and
statements: #include lines, `using namespace`, namespaces, types, templates,
MT_LIBRARY blocks and function declarations or definitions go to file scope; every
other statement goes, in order, into the generated main(), which catches and reports an
escaping exception. #line directives point compile errors at the markdown file.

Markers (an HTML comment on the line just before a block):
  <!-- snippet: skip (why) -->   the next ```cpp block is not compiled (say why)
  <!-- snippet: output -->       the next ```text block is what the preceding ```cpp
                                 block prints to stdout; `...` alone on a line matches
                                 any lines, and inside a line matches any text.
"""
import json
import re
import subprocess
import sys
from pathlib import Path

FENCE = re.compile(r"^```\s*([\w+-]*)\s*$")
MARKER = re.compile(r"^<!--\s*snippet:\s*(\w[\w-]*)\b.*-->\s*$")
# `Type name(` with no '=' before the '(': a function declaration or definition.
FUNCTION = re.compile(r"^(?:(?:static|inline|constexpr|extern)\s+)*[\w:<>,\s\*&]+?[\s\*&]+[\w:~]+\s*\(")
TOP_LEVEL_START = re.compile(
    r"^(#|using\s+namespace\b|namespace\b|struct\b|class\b|enum\b|template\b|MT_LIBRARY|typedef\b|"
    r"using\s+\w+\s*=)")
STATEMENT_START = re.compile(r"^(return|auto|if|for|while|do|switch|try|throw|else|case|goto)\b")
OUTPUT_MARK = "@@snippet"


def parse_blocks(text, doc):
    """The doc's fenced blocks: dicts with lang, first line number, lines, and markers."""
    blocks, lines = [], text.splitlines()
    i, pending = 0, None
    while i < len(lines):
        m_mark = MARKER.match(lines[i].strip())
        if m_mark:
            pending = m_mark.group(1)
            i += 1
            continue
        m = FENCE.match(lines[i].strip())
        if not m:
            if lines[i].strip():
                pending = None  # a marker applies to the block right after it
            i += 1
            continue
        lang, start, body = m.group(1).lower(), i + 2, []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith("```"):
            body.append(lines[i])
            i += 1
        if i == len(lines):
            sys.exit(f"{doc}:{start - 1}: unterminated ``` block")
        blocks.append({"lang": lang, "line": start, "lines": body, "marker": pending})
        pending = None
        i += 1
    return blocks


def strip_comment(line):
    """The line without a trailing // comment (string literals respected)."""
    out, quote, j = [], None, 0
    while j < len(line):
        c = line[j]
        if quote:
            out.append(c)
            if c == "\\" and j + 1 < len(line):
                out.append(line[j + 1])
                j += 1
            elif c == quote:
                quote = None
        elif c in "\"'":
            quote = c
            out.append(c)
        elif line.startswith("//", j):
            break
        else:
            out.append(c)
        j += 1
    return "".join(out).rstrip()


def depth_change(code):
    code = re.sub(r'"(\\.|[^"\\])*"', '""', code)
    code = re.sub(r"'(\\.|[^'\\])*'", "''", code)
    return sum(code.count(c) for c in "({[") - sum(code.count(c) for c in ")}]")


def split_items(block):
    """Splits a block into (is_top_level, first_line_number, lines) items; comment lines
    before an item belong to it."""
    items, cur, cur_start, depth, comments = [], [], None, 0, []
    for n, line in enumerate(block["lines"], start=block["line"]):
        code = strip_comment(line).strip()
        if not cur and (not code or code.startswith("/*")):
            if line.strip():
                if not comments:
                    cur_start = n
                comments.append(line)
            continue
        if not cur:
            cur_start = cur_start if comments else n
            cur, comments, first = comments, [], code
        cur.append(line)
        depth += depth_change(code)
        if depth <= 0 and (code.endswith(";") or code.endswith("}") or first.startswith("#")):
            items.append((is_top_level(first), cur_start, cur))
            cur, depth = [], 0
    if cur:
        items.append((is_top_level(first), cur_start, cur))
    return items


def is_top_level(first):
    if TOP_LEVEL_START.match(first):
        return True
    if STATEMENT_START.match(first):
        return False
    head = first.split("(", 1)[0]
    return bool(FUNCTION.match(first)) and "=" not in head and "." not in head and "->" not in head


def generate(doc, root, out_cpp, out_json):
    text = Path(doc).read_text(encoding="utf-8")
    rel = str(Path(doc).resolve().relative_to(Path(root).resolve())) if root else doc
    blocks = parse_blocks(text, rel)
    top, body, expected = [], [], []
    n_cpp, last_cpp = 0, None
    for b in blocks:
        if b["lang"] in ("cpp", "c++"):
            if b["marker"] == "skip":
                continue
            n_cpp += 1
            last_cpp = n_cpp
            body.append(f'  std::printf("{OUTPUT_MARK} {n_cpp} {rel}:{b["line"]}\\n");')
            for kind, start, lines in split_items(b):
                dest = top if kind else body
                dest.append(f'#line {start} "{rel}"')
                dest.extend(("" if kind else "  ") + l if l.strip() else l for l in lines)
        elif b["marker"] == "output":
            if last_cpp is None:
                sys.exit(f"{rel}:{b['line']}: an output block needs a ```cpp block before it")
            expected.append({"block": last_cpp, "line": b["line"], "lines": b["lines"]})
            last_cpp = None
    if n_cpp == 0:
        sys.exit(f"{rel}: no ```cpp blocks")
    out = [f"// Generated from {rel} by tools/doc_snippets.py; edit the markdown, not this file.",
           "#include <cstdio>", "#include <exception>", "#include \"minitensor.h\"", ""]
    out += top
    out += ["", '#line 1 "doc_snippets_main"', "int main() {", "  std::setvbuf(stdout, nullptr, _IONBF, 0);",
            "  try {"]
    out += body
    out += ["  } catch (const std::exception& e) {",
            f'    std::printf("{OUTPUT_MARK} uncaught exception: %s\\n", e.what());',
            "    return 1;", "  }", "  return 0;", "}", ""]
    Path(out_cpp).write_text("\n".join(out), encoding="utf-8")
    Path(out_json).write_text(json.dumps({"doc": rel, "blocks": n_cpp, "expected": expected},
                                         indent=1), encoding="utf-8")


def line_matches(pattern, line):
    if pattern == line:
        return True
    if "..." not in pattern:
        return False
    parts = [re.escape(p) for p in pattern.split("...")]
    return re.fullmatch(".*".join(parts), line, flags=re.S) is not None


def lines_match(pattern, got):
    """pattern lines against output lines; a line '...' matches any number of lines."""
    if not pattern:
        return not got
    if pattern[0].strip() == "...":
        return any(lines_match(pattern[1:], got[k:]) for k in range(len(got) + 1))
    return bool(got) and line_matches(pattern[0].rstrip(), got[0].rstrip()) and \
        lines_match(pattern[1:], got[1:])


def check(exe, json_path):
    spec = json.loads(Path(json_path).read_text(encoding="utf-8"))
    p = subprocess.run([exe], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sys.stdout.write(p.stdout)
    sys.stderr.write(p.stderr)
    outputs, cur = {}, None
    for line in p.stdout.splitlines():
        if line.startswith(OUTPUT_MARK):
            parts = line.split()
            cur = int(parts[1]) if parts[1].isdigit() else None
            outputs[cur] = []
        elif cur is not None:
            outputs[cur].append(line)
    failed = p.returncode != 0
    if failed:
        print(f"[doc_snippets] {spec['doc']}: the program exited with {p.returncode}")
    ran = len([k for k in outputs if k is not None])
    if not failed and ran != spec["blocks"]:
        print(f"[doc_snippets] {spec['doc']}: {ran} of {spec['blocks']} blocks ran")
        failed = True
    for e in spec["expected"]:
        got = outputs.get(e["block"], [])
        if not lines_match(e["lines"], got):
            failed = True
            print(f"[doc_snippets] {spec['doc']}:{e['line']}: the output block does not match "
                  f"what block {e['block']} printed.\n--- documented\n" + "\n".join(e["lines"]) +
                  "\n--- printed\n" + "\n".join(got))
    print(f"[doc_snippets] {spec['doc']}: {spec['blocks']} blocks, "
          f"{len(spec['expected'])} documented outputs: {'FAIL' if failed else 'OK'}")
    return 1 if failed else 0


def main(argv):
    if len(argv) >= 5 and argv[1] == "extract":
        root = None
        if "--root" in argv:
            root = argv[argv.index("--root") + 1]
        generate(argv[2], root, argv[3], argv[4])
        return 0
    if len(argv) == 4 and argv[1] == "check":
        return check(argv[2], argv[3])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
